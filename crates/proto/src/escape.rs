//! Escaping names and messages from a peer before they reach a terminal or a log.
//!
//! A peer chooses file names, and the messages it sends name them: a name holding an
//! escape sequence could rewrite the user's terminal, and one holding a newline could
//! forge lines in a server's log. Like `ls -b` or Rust's `escape_debug`, control
//! characters (newline and ESC included), bidirectional-text overrides and bytes that
//! are not UTF-8 are shown as escapes; a backslash is doubled so that the escaped form
//! is unambiguous. Everything else, non-ASCII letters included, prints as it is.

use std::fmt::Write;

/// `bytes` (a file name, not necessarily UTF-8) in a form safe to print.
pub fn escape_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        push_escaped(&mut out, chunk.valid());
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// `text` (a message that may name files from a peer) in a form safe to print.
pub fn escape_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    push_escaped(&mut out, text);
    out
}

fn push_escaped(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x80 && c.is_control() => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c.is_control() || is_bidi_control(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
}

/// Characters that reorder the text around them (the "Trojan Source" class).
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_and_invalid_utf8_are_escaped() {
        assert_eq!(escape_bytes(b"a\x1b[31mb\nc"), "a\\x1b[31mb\\nc");
        assert_eq!(escape_bytes(b"bad\xff\xfe."), "bad\\xff\\xfe.");
        assert_eq!(escape_text("tab\there\r\x7f"), "tab\\there\\r\\x7f");
        assert_eq!(escape_text("back\\slash"), "back\\\\slash");
        assert_eq!(escape_text("\u{202e}txt.exe"), "\\u{202e}txt.exe");
        assert_eq!(escape_text("\u{85}"), "\\u{85}");
    }

    #[test]
    fn ordinary_names_print_as_they_are() {
        for s in ["plain/name.txt", "ünïcødé ✓", "with space", "日本語"] {
            assert_eq!(escape_text(s), s);
            assert_eq!(escape_bytes(s.as_bytes()), s);
        }
    }

    #[test]
    fn nothing_escaped_holds_a_control_byte() {
        let all: Vec<u8> = (0..=255).collect();
        let e = escape_bytes(&all);
        assert!(!e.bytes().any(|b| b < 0x20 || b == 0x7f), "{e:?}");
    }
}
