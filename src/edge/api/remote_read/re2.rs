//! PromQL's regular expressions (Go's RE2 syntax) in the words of the
//! `regex` crate, which reads most of them alike but not all: its Perl
//! classes (`\d`, `\w`, `\s`) and word boundaries (`\b`) are Unicode-aware,
//! where RE2's are ASCII, so `page:\d` also took `page:١` (an Arabic-Indic
//! digit); `\<` and `\>` are word boundaries to it and literal `<`, `>` to
//! RE2; and it has no `\Q…\E` (a literal text). [`translate`] rewrites
//! those and leaves the rest as written: Unicode classes (`\pN`), `.`,
//! flags and POSIX classes mean the same in both.

/// RE2's ASCII Perl classes, as the class items the `regex` crate reads
/// inside brackets.
fn ascii_class(class: char) -> Option<&'static str> {
    Some(match class {
        'd' => "0-9",
        'w' => "0-9A-Za-z_",
        's' => "\\t\\n\\x0C\\r ",
        _ => return None,
    })
}

/// `pattern` (RE2) rewritten for the `regex` crate, matching the same
/// strings (see the module's doc).
pub(super) fn translate(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars().peekable();
    // Inside brackets, and whether a `]` now would be a literal (first).
    let (mut class, mut first) = (false, false);
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let Some(e) = chars.next() else {
                    // A trailing backslash: the regex crate refuses it too.
                    out.push('\\');
                    break;
                };
                let lower = e.to_ascii_lowercase();
                match (class, ascii_class(lower)) {
                    (false, Some(items)) if e == lower => out.push_str(&format!("[{items}]")),
                    (false, Some(items)) => out.push_str(&format!("[^{items}]")),
                    (true, Some(items)) if e == lower => out.push_str(items),
                    // A negated class within brackets: nested, as the crate allows.
                    (true, Some(items)) => out.push_str(&format!("[^{items}]")),
                    (false, None) if lower == 'b' => out.push_str(&format!("(?-u:\\{e})")),
                    (false, None) if e == 'Q' => {
                        let mut literal = String::new();
                        while let Some(l) = chars.next() {
                            if l == '\\' && chars.peek() == Some(&'E') {
                                chars.next();
                                break;
                            }
                            literal.push(l);
                        }
                        out.push_str(&regex::escape(&literal));
                    }
                    (_, None) if e == '<' || e == '>' => out.push(e),
                    // An octal code (`\141`; `\0` alone), which the crate
                    // does not read: as hex.
                    (_, None)
                        if e.is_digit(8)
                            && (e == '0' || chars.peek().is_some_and(|d| d.is_digit(8))) =>
                    {
                        let mut code = e.to_digit(8).unwrap_or(0);
                        for _ in 0..2 {
                            match chars.peek().and_then(|d| d.to_digit(8)) {
                                Some(d) => {
                                    code = code * 8 + d;
                                    chars.next();
                                }
                                None => break,
                            }
                        }
                        out.push_str(&format!("\\x{{{code:X}}}"));
                    }
                    _ => {
                        out.push('\\');
                        out.push(e);
                    }
                }
                first = false;
            }
            '[' if !class => {
                out.push(c);
                class = true;
                first = true;
                if chars.peek() == Some(&'^') {
                    out.push('^');
                    chars.next();
                }
            }
            // A POSIX class (`[:alpha:]`) within brackets, copied whole.
            '[' if chars.peek() == Some(&':') => {
                out.push(c);
                for p in chars.by_ref() {
                    out.push(p);
                    if p == ']' {
                        break;
                    }
                }
                first = false;
            }
            ']' if class && !first => {
                out.push(c);
                class = false;
            }
            // Within brackets RE2 has no nested class and no set operation
            // (`&&`, `--`, `~~`): literal characters to it, escaped here.
            '[' | '&' | '~' if class => {
                out.push('\\');
                out.push(c);
                first = false;
            }
            '-' if class && chars.peek() == Some(&'-') => {
                out.push_str("-\\-");
                chars.next();
                first = false;
            }
            _ => {
                out.push(c);
                first = false;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `pattern`, read as PromQL reads it, matches `text` whole.
    fn matches(pattern: &str, text: &str) -> bool {
        regex::Regex::new(&format!("^(?:{})$", translate(pattern)))
            .unwrap_or_else(|e| panic!("{pattern}: {e}"))
            .is_match(text)
    }

    #[test]
    fn perl_classes_and_word_boundaries_are_ascii_as_in_re2() {
        assert!(matches(r"page:\d", "page:7"));
        assert!(!matches(r"page:\d", "page:١"), "an Arabic-Indic digit");
        assert!(matches(r"page:\D", "page:١"));
        assert!(!matches(r"page:[\d]", "page:١"));
        assert!(matches(r"page:[^\d]", "page:١"));
        assert!(!matches(r"page:[^\D]", "page:١"));
        assert!(matches(r"page:[^\D]", "page:4"));
        assert!(matches(r"page:[a\D]", "page:é"));
        assert!(matches(r"\w+", "Abc_9"));
        assert!(
            !matches(r"\w+", "\u{212A}"),
            "the Kelvin sign is no ASCII letter"
        );
        assert!(!matches(r"\w", "é"));
        assert!(matches(r"\W", "é"));
        assert!(matches(r"a\sb", "a\tb") && !matches(r"a\sb", "a\u{a0}b"));
        assert!(matches(r"a\Sb", "a\u{a0}b"));
        // `é` is no ASCII word character: a boundary after `caf`.
        assert!(matches(r".*caf\b.*", "café"));
        assert!(!matches(r".*caf\B.*", "café"));
        // Unicode classes and `.` stay Unicode.
        assert!(matches(r"\pN", "١") && matches(r"page:.", "page:é"));
        assert!(matches(r"[[:alpha:]]+", "abc") && !matches(r"[[:alpha:]]", "é"));
    }

    #[test]
    fn re2_literals_read_as_re2_reads_them() {
        assert!(matches(r"a\>", "a>") && !matches(r"a\>.*", "a/b"));
        assert!(matches(r"\<a", "<a"));
        assert!(matches(r"\Qpage:1.*\E", "page:1.*"));
        assert!(!matches(r"\Qpage:1.*\E", "page:10"));
        assert!(matches(r"\Qa+", "a+"), "\\Q to the end without \\E");
        assert!(matches(r"x\Q[\Ey", "x[y"));
        // What both read alike is left alone.
        assert_eq!(
            translate(r"page:(a|b)\.x{2}[]a-z]\x41\pL"),
            r"page:(a|b)\.x{2}[]a-z]\x41\pL"
        );
        assert!(matches(r"[]a]+", "]a]"));
        assert!(matches(r"[^]a]", "b") && !matches(r"[^]a]", "]"));
    }

    #[test]
    fn brackets_hold_no_nested_class_nor_set_operation_in_re2() {
        assert!(matches(r"page:[[a]]", "page:[]") && matches(r"page:[[a]]", "page:a]"));
        assert!(!matches(r"page:[[a]]", "page:a"));
        assert!(matches(r"[a&&b]", "&") && matches(r"[a&&b]", "a") && !matches(r"[a&&b]", "c"));
        assert!(matches(r"[a~~b]", "~") && matches(r"[a~~b]", "b"));
        assert!(
            matches(r"[!--]", ",") && !matches(r"[!--]", "."),
            "a range from ! to -"
        );
        assert!(matches(r"[[:digit:]x]", "7") && matches(r"[[:digit:]x]", "x"));
        assert!(matches(r"page:[[]", "page:["));
    }

    #[test]
    fn octal_codes_read_as_re2_reads_them() {
        assert!(matches(r"page:\141", "page:a") && !matches(r"page:\141", "page:141"));
        assert!(matches(r"\12", "\n") && matches(r"\0", "\0"));
        assert!(matches(r"[\141-\143]", "b"));
        assert!(matches(r"\1417", "a7"), "three digits at most");
    }

    #[test]
    fn ascii_classes_keep_a_pattern_small() {
        // Unicode `\w{200}` went over serve's 256 KiB compile limit.
        let re = regex::RegexBuilder::new(&translate(r"\w{200}"))
            .size_limit(256 * 1024)
            .build();
        assert!(re.is_ok(), "{re:?}");
    }
}
