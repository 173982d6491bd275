//! Key paths and locations in the TOML source.

use super::*;

/// One step of a dotted key path.
#[derive(Clone, Debug)]
pub(super) enum Seg {
    Key(String),
    Index(usize),
}

/// A dotted key path such as `fence[2].options.password`.
#[derive(Clone, Debug, Default)]
pub(super) struct KeyPath(pub(super) Vec<Seg>);

impl KeyPath {
    pub(super) fn of(keys: &[&str]) -> KeyPath {
        KeyPath(keys.iter().map(|k| Seg::Key(k.to_string())).collect())
    }
    pub(super) fn key(&self, key: &str) -> KeyPath {
        let mut p = self.clone();
        p.0.push(Seg::Key(key.to_string()));
        p
    }
    pub(super) fn index(&self, i: usize) -> KeyPath {
        let mut p = self.clone();
        p.0.push(Seg::Index(i));
        p
    }
    pub(super) fn is_root(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                Seg::Key(k) => {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    if !k.is_empty()
                        && k.bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                    {
                        f.write_str(k)?;
                    } else {
                        write!(f, "{k:?}")?;
                    }
                }
                Seg::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// The parsed text with its spans, so that any value can be traced back to a line.
pub(super) struct Source<'a> {
    pub(super) path: &'a Path,
    pub(super) text: &'a str,
    pub(super) doc: Spanned<DeTable<'a>>,
    /// The offset of every line's first byte, so that locating an offset is a binary
    /// search rather than a count of the newlines before it: a config with many errors
    /// would otherwise take quadratic time.
    pub(super) line_starts: Vec<usize>,
    pub(super) schema: Schema,
}

/// The unknown keys step 2 found: the first in the file, built only when it is the first
/// so far, and how many there are.
#[derive(Default)]
pub(super) struct Findings {
    pub(super) first: Option<(usize, ConfigError)>,
    pub(super) unknown_keys: usize,
}

impl Findings {
    /// Records an unknown key at offset `pos`; `error` runs only if it is now the first in
    /// the file.
    pub(super) fn push(&mut self, pos: usize, error: impl FnOnce() -> ConfigError) {
        self.unknown_keys += 1;
        if self.first.as_ref().is_none_or(|(p, _)| pos < *p) {
            self.first = Some((pos, error()));
        }
    }

    /// The error to report. Of many unknown keys (a file that is not a warden config) it
    /// names the first and counts the rest, so the operator knows there is more to fix.
    pub(super) fn into_error(self) -> Option<ConfigError> {
        let more = self.unknown_keys.saturating_sub(1);
        self.first.map(|(_, error)| match error {
            ConfigError::UnknownKey {
                at,
                key,
                name,
                context,
            } if more > 0 => ConfigError::UnknownKey {
                at,
                key,
                name,
                context: format!(
                    "{context} ({more} more unknown key{} follow{})",
                    if more == 1 { "" } else { "s" },
                    if more == 1 { "s" } else { "" }
                ),
            },
            other => other,
        })
    }
}

impl<'a> Source<'a> {
    pub(super) fn new(text: &'a str, path: &'a Path) -> Result<Source<'a>, ConfigError> {
        match DeTable::parse(text) {
            Ok(doc) => Ok(Source {
                path,
                text,
                doc,
                line_starts: line_starts(text),
                schema: Schema::new(),
            }),
            Err(e) => {
                let span = e.span().unwrap_or(0..0);
                let mut message = one_line(e.message().trim()).into_owned();
                // toml says only "duplicate key"; name it, as every other error does.
                if message == "duplicate key" {
                    if let Some(key) = text.get(span.clone()).filter(|k| !k.contains('\n')) {
                        message = format!("duplicate key `{}`", one_line(key));
                    }
                }
                Err(ConfigError::Syntax {
                    at: locate(path, text, &line_starts(text), span.start),
                    message,
                })
            }
        }
    }

    pub(super) fn location(&self, offset: usize) -> Location {
        locate(self.path, self.text, &self.line_starts, offset)
    }

    /// Whether `path` is set in the file.
    pub(super) fn has(&self, path: &KeyPath) -> bool {
        let mut table: &DeTable<'a> = self.doc.get_ref();
        for (i, seg) in path.0.iter().enumerate() {
            let Seg::Key(k) = seg else { return false };
            let Some(next) = table.get(k.as_str()) else {
                return false;
            };
            match next.get_ref() {
                DeValue::Table(t) => table = t,
                _ => return i + 1 == path.0.len(),
            }
        }
        true
    }

    /// Where the value at `path` is, or, when it is absent, the deepest table on the way
    /// to it: a missing key is reported at the table that lacks it.
    pub(super) fn at(&self, path: &KeyPath) -> Location {
        self.location(self.span_at(path).start)
    }

    /// The span of the value at `path`, or of the deepest value on the way to it.
    pub(super) fn span_at(&self, path: &KeyPath) -> std::ops::Range<usize> {
        let mut span = self.doc.span();
        let mut table: &DeTable<'a> = self.doc.get_ref();
        let mut array: Option<&[Spanned<DeValue<'a>>]> = None;
        for seg in &path.0 {
            let next = match (seg, array) {
                (Seg::Key(k), None) => table.get(k.as_str()),
                (Seg::Index(i), Some(items)) => items.get(*i),
                _ => None,
            };
            let Some(next) = next else {
                break;
            };
            span = next.span();
            array = None;
            match next.get_ref() {
                DeValue::Table(t) => table = t,
                DeValue::Array(a) => array = Some(a),
                _ => {}
            }
        }
        span
    }

    /// The value at `path`, if the file has one there.
    pub(super) fn value_at(&self, path: &KeyPath) -> Option<&Spanned<DeValue<'a>>> {
        let (first, rest) = path.0.split_first()?;
        let Seg::Key(k) = first else { return None };
        let mut value = self.doc.get_ref().get(k.as_str())?;
        for seg in rest {
            value = match (seg, value.get_ref()) {
                (Seg::Key(k), DeValue::Table(t)) => t.get(k.as_str())?,
                (Seg::Index(i), DeValue::Array(a)) => a.get(*i)?,
                _ => return None,
            };
        }
        Some(value)
    }

    /// Steps 2 to 4 of the module docs.
    pub(super) fn build(&self) -> Result<Config, ConfigError> {
        let config = self.read()?;
        self.validate(&config)?;
        Ok(config)
    }

    /// A refused value. The reason may echo the value, so control characters in it are
    /// escaped: an error is one line (SPEC §7).
    pub(super) fn invalid(&self, path: &KeyPath, reason: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            at: self.at(path),
            key: path.to_string(),
            reason: one_line(&reason.into()).into_owned(),
        }
    }
}

/// The offset of every line's first byte.
pub(super) fn line_starts(text: &str) -> Vec<usize> {
    std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .collect()
}

/// The line and column (in characters) of a byte offset, found in `line_starts` by binary
/// search: locating many errors must not cost a scan of the text each.
pub(super) fn locate(path: &Path, text: &str, line_starts: &[usize], offset: usize) -> Location {
    let offset = offset.min(text.len());
    // line_starts[0] is 0, so at least one start is <= offset.
    let line = line_starts.partition_point(|&start| start <= offset);
    let line_start = line_starts[..line].last().copied().unwrap_or(0);
    let column = text
        .get(line_start..offset)
        .map(|s| s.chars().count())
        .unwrap_or(0)
        + 1;
    Location {
        path: path.to_path_buf(),
        line: line.max(1),
        column,
    }
}
