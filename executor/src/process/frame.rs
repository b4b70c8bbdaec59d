//! The plugin protocol's framing (proto/wharf/v1/plugin.proto): a 4-byte big-endian
//! unsigned length, then that many bytes of one encoded message.

use std::io::{self, Read};

/// Largest frame either side accepts, in bytes: a poll answer or a put of many large
/// records fits; a corrupt length (a plugin printing text to stdout) is refused rather
/// than allocated.
pub const MAX_FRAME_BYTES: usize = 64 * 1024 * 1024;

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The length prefix exceeds [`MAX_FRAME_BYTES`]: usually text written to stdout,
    /// which carries only frames.
    #[error(
        "frame of {len} bytes exceeds the limit of {MAX_FRAME_BYTES} (stdout must carry only protocol frames; log to stderr)"
    )]
    TooLarge {
        /// The announced length.
        len: usize,
    },
    /// The stream ended inside a frame.
    #[error("stream ended inside a frame")]
    Truncated,
    /// Reading failed.
    #[error("read failed: {0}")]
    Io(#[from] io::Error),
}

/// One frame: the length prefix followed by `payload`.
pub fn encode(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + payload.len());
    // A payload above u32::MAX is not representable; the caller's messages never come near.
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// Reads the next frame's payload; `Ok(None)` when the stream ended cleanly between
/// frames.
///
/// # Errors
/// [`FrameError`]: too large, truncated, or the read failed.
pub fn read(r: &mut impl Read) -> Result<Option<Vec<u8>>, FrameError> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(FrameError::Truncated),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge { len });
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => FrameError::Truncated,
        _ => FrameError::Io(e),
    })?;
    Ok(Some(payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_read_back_in_order_and_a_clean_end_is_none() {
        let mut bytes = encode(b"hello");
        bytes.extend(encode(b""));
        bytes.extend(encode(&[7u8; 300]));
        let mut r = bytes.as_slice();
        assert_eq!(read(&mut r).unwrap().unwrap(), b"hello");
        assert_eq!(read(&mut r).unwrap().unwrap(), b"");
        assert_eq!(read(&mut r).unwrap().unwrap(), vec![7u8; 300]);
        assert!(read(&mut r).unwrap().is_none());
    }

    #[test]
    fn a_stream_ending_inside_a_frame_is_truncated() {
        let bytes = encode(b"hello");
        let mut r = &bytes[..6];
        assert!(matches!(read(&mut r), Err(FrameError::Truncated)));
        let mut r = &bytes[..2];
        assert!(matches!(read(&mut r), Err(FrameError::Truncated)));
    }

    #[test]
    fn text_on_stdout_is_refused_as_a_frame_too_large() {
        let mut r = b"Starting plugin...\n".as_slice();
        let err = read(&mut r).unwrap_err();
        assert!(matches!(err, FrameError::TooLarge { .. }), "{err}");
        assert!(err.to_string().contains("log to stderr"), "{err}");
    }
}
