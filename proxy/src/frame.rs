//! Protocol messages as whole frames, so they are forwarded byte for byte.
//!
//! After the startup packet every message of the PostgreSQL protocol is a
//! type byte and a big-endian length that counts itself. The proxy reads
//! just that header to find where a message ends, forwards the bytes as
//! they came, and hands the few messages it must understand (`Query`,
//! `Parse`, `Bind`, `Close`) to pgwire's decoders. Nothing is re-encoded
//! unless the proxy changes it.

use bytes::BytesMut;
use pgwire::error::ErrorInfo;
use pgwire::messages::response::ErrorResponse;
use pgwire::messages::{DecodeContext, Message, ProtocolVersion};

/// A whole message: its type byte, and its bytes (header included).
pub struct Frame {
    pub kind: u8,
    pub bytes: BytesMut,
}

/// Why a stream of messages cannot be read on.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("a {kind:?} message of {len} bytes is over proxy.max_message_bytes ({max})", kind = char::from(*kind))]
    TooLarge { kind: u8, len: usize, max: usize },
    #[error("a message declares a length of {0}, under the 4 bytes of the length itself")]
    BadLength(i32),
}

/// Splits the next whole message off `buf`, if it has arrived. A header
/// declaring more than `max` bytes is refused before the body is read,
/// so a client cannot make the proxy buffer it.
pub fn next(buf: &mut BytesMut, max: usize) -> Result<Option<Frame>, FrameError> {
    if buf.len() < 5 {
        return Ok(None);
    }
    let kind = buf[0];
    let declared = i32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]);
    if declared < 4 {
        return Err(FrameError::BadLength(declared));
    }
    let len = declared as usize + 1;
    if len > max {
        return Err(FrameError::TooLarge { kind, len, max });
    }
    if buf.len() < len {
        buf.reserve(len - buf.len());
        return Ok(None);
    }
    Ok(Some(Frame {
        kind,
        bytes: buf.split_to(len),
    }))
}

/// A message at the start of a buffer, looked at without taking it.
#[derive(Debug, PartialEq, Eq)]
pub enum Peeked<'a> {
    /// All of it has come: its type byte and its bytes (header included).
    Whole(u8, &'a [u8]),
    /// Its header has come, not all of its body: its type byte.
    Partial(u8),
    /// Its length is under the 4 bytes of the length itself.
    Malformed,
}

/// The messages at the start of `buf`, in order, without taking them
/// (a held statement looks ahead at what the app sent after it): it ends
/// after a partial or malformed one, or where the next header has not
/// come.
pub fn peek(buf: &[u8]) -> impl Iterator<Item = Peeked<'_>> {
    let mut at = 0;
    let mut done = false;
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        let header = buf.get(at..at + 5)?;
        let declared = i32::from_be_bytes([header[1], header[2], header[3], header[4]]);
        let Some(len) = usize::try_from(declared).ok().filter(|&len| len >= 4) else {
            done = true;
            return Some(Peeked::Malformed);
        };
        let Some(bytes) = buf.get(at..at + 1 + len) else {
            done = true;
            return Some(Peeked::Partial(header[0]));
        };
        at += 1 + len;
        Some(Peeked::Whole(header[0], bytes))
    })
}

/// One message's bytes: `kind`, its length, `body` (for tests).
#[cfg(test)]
pub(crate) fn message(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![kind];
    m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

/// Decodes a frame with pgwire's decoder for its type.
pub fn decode<M: Message>(frame: &Frame) -> Option<M> {
    let mut bytes = frame.bytes.clone();
    let ctx = DecodeContext::new(ProtocolVersion::default());
    M::decode(&mut bytes, &ctx).ok().flatten()
}

/// Appends `message` encoded.
pub fn encode<M: Message>(message: &M, out: &mut BytesMut) {
    // Only the proxy's own messages are encoded, all far under any limit.
    if let Err(e) = message.encode(out) {
        tracing::error!("encoding a protocol message: {e}");
    }
}

/// An ErrorResponse of `severity` (`ERROR` or `FATAL`) with SQLSTATE
/// `code`.
pub fn error(severity: &str, code: &str, message: &str, hint: Option<&str>) -> BytesMut {
    let mut info = ErrorInfo::new(severity.into(), code.into(), message.into());
    info.hint = hint.map(str::to_string);
    let mut out = BytesMut::new();
    encode(&ErrorResponse::from(info), &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_messages_are_split_off_and_partial_ones_wait() {
        let mut buf = BytesMut::from(&b"Q\0\0\0\x09abcd\0S\0\0"[..]);
        let frame = next(&mut buf, 1024).unwrap().unwrap();
        assert_eq!(frame.kind, b'Q');
        assert_eq!(&frame.bytes[..], b"Q\0\0\0\x09abcd\0");
        assert!(next(&mut buf, 1024).unwrap().is_none(), "S is incomplete");
        buf.extend_from_slice(b"\0\x04");
        assert_eq!(next(&mut buf, 1024).unwrap().unwrap().kind, b'S');
        assert!(buf.is_empty());
    }

    #[test]
    fn messages_are_peeked_whole_then_partial_or_malformed() {
        let buf = [message(b'E', b"\0\0\0\0\0"), b"Q\0\0\0\x09ab".to_vec()].concat();
        let peeked: Vec<Peeked> = peek(&buf).collect();
        assert_eq!(
            peeked,
            [Peeked::Whole(b'E', &buf[..10]), Peeked::Partial(b'Q')]
        );
        assert_eq!(peek(&buf[..14]).count(), 1, "the next header has not come");
        let bad = b"E\0\0\0\x02S\0\0\0\x04";
        assert_eq!(peek(bad).collect::<Vec<_>>(), [Peeked::Malformed]);
    }

    #[test]
    fn oversized_and_malformed_headers_are_refused_before_the_body() {
        let mut buf = BytesMut::from(&b"Q\x7f\0\0\0"[..]);
        assert!(matches!(
            next(&mut buf, 1 << 20),
            Err(FrameError::TooLarge { kind: b'Q', .. })
        ));
        let mut buf = BytesMut::from(&b"Q\0\0\0\x02"[..]);
        assert!(matches!(
            next(&mut buf, 1 << 20),
            Err(FrameError::BadLength(2))
        ));
        let mut buf = BytesMut::from(&b"Q\xff\xff\xff\xff"[..]);
        assert!(matches!(
            next(&mut buf, 1 << 20),
            Err(FrameError::BadLength(-1))
        ));
    }

    #[test]
    fn the_proxys_errors_are_pgwire_encoded_error_responses() {
        let bytes = error("ERROR", "0A000", "no", Some("hint"));
        let mut copy = bytes.clone();
        let ctx = DecodeContext::new(ProtocolVersion::default());
        let decoded = ErrorResponse::decode(&mut copy, &ctx).unwrap().unwrap();
        assert!(decoded.fields.contains(&(b'C', "0A000".to_string())));
        assert!(decoded.fields.contains(&(b'H', "hint".to_string())));
    }
}
