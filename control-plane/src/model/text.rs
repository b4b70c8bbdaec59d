//! How long a text from outside (a caller's name, an executor's error) may be where the
//! control plane keeps or quotes it ([`bounded`]). A leaf: the model, the audit trail and
//! the adapters cut texts the same way.

use std::borrow::Cow;

/// `text` as it may be quoted: unchanged when at most `max_bytes` long, otherwise its
/// longest prefix of at most `max_bytes` bytes that ends on a char boundary, followed by
/// `...[cut, N bytes]` with `N` the original length in bytes. The result is at most
/// `max_bytes` plus the marker (under 40 bytes) long.
pub fn bounded(text: &str, max_bytes: usize) -> Cow<'_, str> {
    if text.len() <= max_bytes {
        return Cow::Borrowed(text);
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}...[cut, {} bytes]", &text[..end], text.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_cut_on_a_char_boundary() {
        // 'é' is two bytes: a cut at 5 would split the third one.
        let cut = bounded("éééé", 5);
        assert_eq!(cut, "éé...[cut, 8 bytes]");
    }

    #[test]
    fn a_text_within_the_bound_is_borrowed_unchanged() {
        assert!(matches!(bounded("short", 5), Cow::Borrowed("short")));
    }
}
