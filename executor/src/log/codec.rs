//! Byte encoding of a [`LogRecord`], shared by both backends.
//!
//! Layout (all integers little-endian): version `u8` (= 1); key flag `u8` then, when set,
//! `u32` length and bytes; value `u32` length and bytes; timestamp flag `u8` then, when
//! set, `i64` milliseconds; header count `u32`, then per header a `u32`-prefixed UTF-8 name
//! and a `u32`-prefixed value. Headers may hold any bytes, which NATS headers cannot, so
//! the JetStream backend stores this encoding as the message payload.

use super::{LogError, LogRecord};

const VERSION: u8 = 1;

/// Encodes a record; the result is what [`decode`] reads back.
pub fn encode(record: &LogRecord) -> Vec<u8> {
    let mut out = Vec::with_capacity(encoded_len(record));
    out.push(VERSION);
    match &record.key {
        Some(key) => {
            out.push(1);
            put_bytes(&mut out, key);
        }
        None => out.push(0),
    }
    put_bytes(&mut out, &record.value);
    match record.timestamp_ms {
        Some(ts) => {
            out.push(1);
            out.extend_from_slice(&ts.to_le_bytes());
        }
        None => out.push(0),
    }
    put_len(&mut out, record.headers.len());
    for (name, value) in &record.headers {
        put_bytes(&mut out, name.as_bytes());
        put_bytes(&mut out, value);
    }
    out
}

/// Size of [`encode`]'s output in bytes.
pub fn encoded_len(record: &LogRecord) -> usize {
    let headers: usize = record
        .headers
        .iter()
        .map(|(n, v)| 8 + n.len() + v.len())
        .sum();
    1 + 1
        + record.key.as_ref().map_or(0, |k| 4 + k.len())
        + 4
        + record.value.len()
        + 1
        + record.timestamp_ms.map_or(0, |_| 8)
        + 4
        + headers
}

/// Decodes what [`encode`] wrote; anything else is [`LogError::Corrupt`].
pub fn decode(bytes: &[u8]) -> Result<LogRecord, LogError> {
    let mut r = Reader { bytes, at: 0 };
    let version = r.u8()?;
    if version != VERSION {
        return Err(LogError::Corrupt(format!(
            "unknown record encoding version {version}"
        )));
    }
    let key = match r.u8()? {
        0 => None,
        _ => Some(r.bytes()?.to_vec()),
    };
    let value = r.bytes()?.to_vec();
    let timestamp_ms = match r.u8()? {
        0 => None,
        _ => Some(i64::from_le_bytes(r.array::<8>()?)),
    };
    let count = r.u32()? as usize;
    let mut headers = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        let name = String::from_utf8(r.bytes()?.to_vec())
            .map_err(|_| LogError::Corrupt("header name is not UTF-8".into()))?;
        headers.push((name, r.bytes()?.to_vec()));
    }
    if r.at != bytes.len() {
        return Err(LogError::Corrupt("trailing bytes after record".into()));
    }
    Ok(LogRecord {
        key,
        value,
        headers,
        timestamp_ms,
        partition: None,
    })
}

fn put_len(out: &mut Vec<u8>, len: usize) {
    // Records are far below 4 GiB (fetch and append sizes are bounded well below that).
    out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_len(out, bytes.len());
    out.extend_from_slice(bytes);
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], LogError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len())
            .ok_or_else(|| LogError::Corrupt("record is truncated".into()))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], LogError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, LogError> {
        Ok(self.array::<1>()?[0])
    }

    fn u32(&mut self) -> Result<u32, LogError> {
        Ok(u32::from_le_bytes(self.array::<4>()?))
    }

    fn bytes(&mut self) -> Result<&'a [u8], LogError> {
        let len = self.u32()? as usize;
        self.take(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_survives_encoding_byte_for_byte() {
        let record = LogRecord {
            key: Some(vec![0, 255, 10]),
            value: b"hello\r\nworld".to_vec(),
            headers: vec![("h".into(), vec![0, 1]), ("h".into(), vec![])],
            timestamp_ms: Some(-5),
            partition: None,
        };
        let bytes = encode(&record);
        assert_eq!(bytes.len(), encoded_len(&record));
        assert_eq!(decode(&bytes).expect("decodes"), record);
    }

    #[test]
    fn a_truncated_record_is_reported_corrupt() {
        let record = LogRecord {
            key: None,
            value: b"abc".to_vec(),
            headers: vec![],
            timestamp_ms: None,
            partition: None,
        };
        let bytes = encode(&record);
        assert!(matches!(
            decode(&bytes[..bytes.len() - 1]),
            Err(LogError::Corrupt(_))
        ));
    }
}
