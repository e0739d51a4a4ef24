//! An incremental Server-Sent Events parser (the WHATWG event-stream
//! format): bytes in, events out, whatever the chunking.
//!
//! Lines end with LF, CRLF or a lone CR (also when a CRLF pair straddles two
//! chunks); lines starting with `:` are comments; `data` lines of one event
//! are joined with `\n`; one leading space after the colon is dropped; a
//! UTF-8 byte-order mark at the very start is skipped. At the end of the
//! stream an event that was not terminated by a blank line is still
//! delivered, because several servers close right after their last `data:`
//! line.

use crate::error::ProviderError;

/// The largest event (all its lines together) the parser accepts.
pub const MAX_EVENT_BYTES: usize = 32 * 1024 * 1024;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field, empty when absent (the spec's `message`).
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
    /// The last `id:` field seen, when any.
    pub id: Option<String>,
}

/// The incremental parser.
#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    pending_cr: bool,
    started: bool,
    event: String,
    data: String,
    has_data: bool,
    last_id: Option<String>,
    event_bytes: usize,
}

impl SseParser {
    /// Returns a parser at the start of a stream.
    pub fn new() -> Self {
        SseParser::default()
    }

    /// Feeds the next chunk, appending every completed event to `out`.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), ProviderError> {
        let mut bytes = chunk;
        if !self.started {
            // Skip a UTF-8 BOM, which may itself be split across chunks.
            let bom = [0xEF, 0xBB, 0xBF];
            let have = self.line.len();
            let probe: Vec<u8> = self
                .line
                .iter()
                .copied()
                .chain(bytes.iter().copied())
                .take(3)
                .collect();
            if bom.starts_with(&probe) && probe.len() < 3 {
                self.line.extend_from_slice(bytes);
                return Ok(());
            }
            self.started = true;
            if probe == bom {
                let skip = 3 - have;
                self.line.clear();
                bytes = &bytes[skip.min(bytes.len())..];
            }
        }
        for &byte in bytes {
            if self.pending_cr {
                self.pending_cr = false;
                if byte == b'\n' {
                    continue;
                }
            }
            match byte {
                b'\n' => self.end_line(out)?,
                b'\r' => {
                    self.end_line(out)?;
                    self.pending_cr = true;
                }
                _ => {
                    self.line.push(byte);
                    if self.line.len() + self.event_bytes > MAX_EVENT_BYTES {
                        return Err(ProviderError::malformed(
                            format!("server-sent event larger than {MAX_EVENT_BYTES} bytes"),
                            &String::from_utf8_lossy(&self.line[..self.line.len().min(200)]),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Ends the stream, delivering an unterminated last event.
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) -> Result<(), ProviderError> {
        if !self.line.is_empty() {
            self.end_line(out)?;
        }
        self.dispatch(out);
        Ok(())
    }

    fn end_line(&mut self, out: &mut Vec<SseEvent>) -> Result<(), ProviderError> {
        if self.line.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        let line = String::from_utf8_lossy(&self.line).into_owned();
        self.line.clear();
        self.event_bytes += line.len();
        if line.starts_with(':') {
            return Ok(());
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_str(), ""),
        };
        match field {
            "event" => self.event = value.to_owned(),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "id" if !value.contains('\0') => self.last_id = Some(value.to_owned()),
            // `retry` and unknown fields are ignored, as the spec says.
            _ => {}
        }
        Ok(())
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        self.event_bytes = 0;
        if !self.has_data {
            self.event.clear();
            return;
        }
        out.push(SseEvent {
            event: std::mem::take(&mut self.event),
            data: std::mem::take(&mut self.data),
            id: self.last_id.clone(),
        });
        self.has_data = false;
    }
}

/// Parses a whole stream at once (for tests and small bodies).
pub fn parse_all(bytes: &[u8]) -> Result<Vec<SseEvent>, ProviderError> {
    let mut parser = SseParser::new();
    let mut out = Vec::new();
    parser.feed(bytes, &mut out)?;
    parser.finish(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: event.to_owned(),
            data: data.to_owned(),
            id: None,
        }
    }

    fn check(input: &[u8], expected: &[SseEvent]) {
        assert_eq!(parse_all(input).unwrap(), expected, "whole input");
        // Every split into single bytes must give the same events.
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        for byte in input {
            parser.feed(std::slice::from_ref(byte), &mut out).unwrap();
        }
        parser.finish(&mut out).unwrap();
        assert_eq!(out, expected, "byte by byte");
    }

    #[test]
    fn basic_events_and_types() {
        check(
            b"event: message_start\ndata: {\"a\":1}\n\nevent: ping\ndata: {}\n\n",
            &[ev("message_start", "{\"a\":1}"), ev("ping", "{}")],
        );
    }

    #[test]
    fn multi_line_data_is_joined() {
        check(
            b"data: first\ndata: second\ndata:third\n\n",
            &[ev("", "first\nsecond\nthird")],
        );
    }

    #[test]
    fn comments_and_crlf_and_cr() {
        check(
            b": keep-alive\r\n\r\nevent: a\r\ndata: 1\r\n\r\ndata: 2\r\rdata:  spaced\n\n",
            &[ev("a", "1"), ev("", "2"), ev("", " spaced")],
        );
    }

    #[test]
    fn bom_and_unterminated_last_event() {
        check(b"\xEF\xBB\xBFdata: [DONE]", &[ev("", "[DONE]")]);
    }

    #[test]
    fn blank_events_are_not_dispatched() {
        check(b"event: lonely\n\n\n\ndata:\n\n", &[ev("", "")]);
    }

    #[test]
    fn ids_are_kept() {
        let events = parse_all(b"id: 7\ndata: x\n\ndata: y\n\n").unwrap();
        assert_eq!(events[0].id.as_deref(), Some("7"));
        assert_eq!(events[1].id.as_deref(), Some("7"));
    }

    #[test]
    fn invalid_utf8_is_replaced_not_fatal() {
        let events = parse_all(b"data: a\xFFb\n\n").unwrap();
        assert_eq!(events[0].data, "a\u{FFFD}b");
    }
}
