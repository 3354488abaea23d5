//! Output helpers: errors with exit codes, key escaping, hex, streaming writes.

use siltdb::Error;
use std::io::{self, Write};

/// An error to report in one line with an exit status.
#[derive(Debug)]
pub struct CliError {
    pub code: u8,
    pub message: String,
}

impl CliError {
    /// Bad input or an unusable file: status 2.
    pub fn input(message: impl Into<String>) -> CliError {
        CliError {
            code: 2,
            message: message.into(),
        }
    }

    /// A check found problems (already printed): status 1.
    pub fn found_problems(message: impl Into<String>) -> CliError {
        CliError {
            code: 1,
            message: message.into(),
        }
    }
}

impl From<Error> for CliError {
    fn from(e: Error) -> CliError {
        CliError::input(describe(&e))
    }
}

impl From<io::Error> for CliError {
    fn from(e: io::Error) -> CliError {
        CliError::input(format!("output error: {e}"))
    }
}

impl From<serde_json::Error> for CliError {
    fn from(e: serde_json::Error) -> CliError {
        CliError::input(format!("JSON error: {e}"))
    }
}

/// One line saying what went wrong, which file, which offset.
pub fn describe(e: &Error) -> String {
    match e {
        Error::Corruption {
            file,
            offset,
            detail,
        } => {
            format!(
                "corrupt file {} at offset {offset}: {detail}",
                file.display()
            )
        }
        Error::Io(io) if io.kind() == io::ErrorKind::NotFound => format!("not found: {io}"),
        other => other.to_string(),
    }
}

/// Escapes bytes for display: printable ASCII as is, `\\` doubled, the rest as `\xHH`.
pub fn escape(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len());
    for &c in b {
        match c {
            b'\\' => s.push_str("\\\\"),
            0x20..=0x7e => s.push(c as char),
            _ => s.push_str(&format!("\\x{c:02x}")),
        }
    }
    s
}

/// Lower-case hex.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|c| format!("{c:02x}")).collect()
}

/// Escaped or hex, as asked.
pub fn show(b: &[u8], as_hex: bool) -> String {
    if as_hex {
        hex(b)
    } else {
        escape(b)
    }
}

/// The byte two ASCII hex digits spell.
fn hex_pair(h: u8, l: u8) -> u8 {
    let v = |d: u8| char::from(d).to_digit(16).unwrap_or(0) as u8;
    (v(h) << 4) | v(l)
}

/// Parses a key given on the command line: hex with `--hex`, else text where `\xHH` escapes
/// a byte and `\\` a backslash.
pub fn parse_key(s: &str, as_hex: bool) -> Result<Vec<u8>, CliError> {
    if as_hex {
        if !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(CliError::input(format!(
                "hex key {s:?} has a non-hex digit"
            )));
        }
        if !s.len().is_multiple_of(2) {
            return Err(CliError::input(format!(
                "hex key {s:?} has an odd number of digits"
            )));
        }
        return Ok(s
            .as_bytes()
            .chunks(2)
            .map(|p| hex_pair(p[0], p[1]))
            .collect());
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 1 < bytes.len() {
            if bytes[i + 1] == b'\\' {
                out.push(b'\\');
                i += 2;
                continue;
            }
            if bytes[i + 1] == b'x' {
                if let Some(&[h, l]) = bytes.get(i + 2..i + 4) {
                    if h.is_ascii_hexdigit() && l.is_ascii_hexdigit() {
                        out.push(hex_pair(h, l));
                        i += 4;
                        continue;
                    }
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    Ok(out)
}

/// Writes a line to stdout; a closed pipe (`silt ... | head`) ends the program quietly.
pub fn line(out: &mut impl Write, s: &str) -> Result<(), CliError> {
    match writeln!(out, "{s}") {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Err(CliError {
            code: 0,
            message: String::new(),
        }),
        Err(e) => Err(e.into()),
    }
}

/// Flushes what [`line()`] wrote: a closed pipe ends the program quietly, any other failure
/// (a full disk under a redirect) is an error, never a silent exit 0.
pub fn flush(out: &mut impl Write) -> Result<(), CliError> {
    match out.flush() {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Err(CliError {
            code: 0,
            message: String::new(),
        }),
        Err(e) => Err(e.into()),
    }
}

/// A writer that, once its reader has closed the pipe, drops what is written instead of
/// failing. For a dump whose exit status depends on records it prints after the reader may
/// have stopped (`silt wal dump BAD.wal | head -1`): the dump runs on to its verdict, and a
/// corrupt file still exits non-zero. Any other write failure is returned as it is.
pub struct DiscardAfterClosedPipe<W> {
    inner: W,
    closed: bool,
}

impl<W: Write> DiscardAfterClosedPipe<W> {
    /// Writes to `inner` until a write finds the pipe closed.
    pub fn new(inner: W) -> Self {
        DiscardAfterClosedPipe {
            inner,
            closed: false,
        }
    }

    /// `r`, with a closed pipe remembered and turned into `Ok(ok)`.
    fn absorb<T>(&mut self, r: io::Result<T>, ok: T) -> io::Result<T> {
        match r {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(ok)
            }
            r => r,
        }
    }
}

impl<W: Write> Write for DiscardAfterClosedPipe<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.closed {
            return Ok(buf.len());
        }
        let r = self.inner.write(buf);
        self.absorb(r, buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.closed {
            return Ok(());
        }
        let r = self.inner.flush();
        self.absorb(r, ())
    }
}

/// Prints a JSON document, pretty-printed (several lines), and a newline.
pub fn print_json(value: &impl serde::Serialize) -> Result<(), CliError> {
    let mut out = io::stdout().lock();
    let s = serde_json::to_string_pretty(value)?;
    line(&mut out, &s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fails every write with `kind`, counting the attempts.
    struct Failing {
        kind: io::ErrorKind,
        attempts: u32,
    }

    impl Write for Failing {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            self.attempts += 1;
            Err(io::Error::from(self.kind))
        }

        fn flush(&mut self) -> io::Result<()> {
            self.attempts += 1;
            Err(io::Error::from(self.kind))
        }
    }

    #[test]
    fn a_closed_pipe_is_absorbed_and_other_failures_are_not() {
        let mut w = DiscardAfterClosedPipe::new(Failing {
            kind: io::ErrorKind::BrokenPipe,
            attempts: 0,
        });
        assert!(line(&mut w, "one").is_ok());
        assert!(line(&mut w, "two").is_ok());
        assert!(flush(&mut w).is_ok());
        // After the first failure nothing more reaches the closed pipe.
        assert_eq!(w.inner.attempts, 1);
        let mut w = DiscardAfterClosedPipe::new(Failing {
            kind: io::ErrorKind::Other,
            attempts: 0,
        });
        assert_eq!(line(&mut w, "one").map_err(|e| e.code).unwrap_err(), 2);
    }

    #[test]
    fn escape_and_parse_roundtrip() {
        let raw = b"a\\b\x00\xffz".to_vec();
        let shown = escape(&raw);
        assert_eq!(shown, "a\\\\b\\x00\\xffz");
        assert_eq!(parse_key(&shown, false).unwrap(), raw);
        assert_eq!(parse_key("00ff10", true).unwrap(), vec![0, 255, 16]);
        assert!(parse_key("0", true).is_err());
        assert!(parse_key("zz", true).is_err());
        assert_eq!(parse_key("plain", false).unwrap(), b"plain");
        // Only hex digits: no sign, no multi-byte character (which once split a char).
        assert_eq!(parse_key("AbCd", true).unwrap(), vec![0xab, 0xcd]);
        for bad in ["+f", "+f+f", "a\u{e9}b", "\u{e9}\u{e9}", " 0"] {
            assert!(parse_key(bad, true).is_err(), "{bad:?}");
        }
        assert_eq!(parse_key("\\x+f", false).unwrap(), b"\\x+f");
        assert_eq!(
            parse_key("\\x\u{e9}", false).unwrap(),
            "\\x\u{e9}".as_bytes()
        );
        assert_eq!(parse_key("\\x4A", false).unwrap(), b"J");
        assert_eq!(parse_key("\\x4", false).unwrap(), b"\\x4");
    }
}
