//! Steps 2 and 3: the serde types are the schema. Their field names (learnt from serde,
//! [`fields_of`]) find unknown keys; serde reads the values, through the functions of
//! [`values`] the fields name; its errors, which carry the key path
//! (`serde_path_to_error`), are told in the words of [`ConfigError`].

use super::*;
use serde::de::{self, value::MapAccessDeserializer, DeserializeSeed, MapAccess, SeqAccess};
use serde::Deserializer;
use warden_fencing::values::{fields_of, Choice};
pub(super) use warden_fencing::values::{nearest, quoted_list};
use warden_fencing::{ScriptFence, SignalFence, SshFence};

/// A serde error with the key path where it happened.
type PathError = serde_path_to_error::Error<toml::de::Error>;

/// One table of the config: where it is and the serde type that reads it. These pairs are
/// all that is written by hand; each table's keys come from its type.
pub(super) struct Table {
    /// Empty for the top level.
    pub(super) path: &'static [&'static str],
    pub(super) fields: &'static [&'static str],
}

fn table<T: serde::de::DeserializeOwned>(path: &'static [&'static str]) -> Table {
    Table {
        path,
        fields: fields_of::<T>(),
    }
}

/// The `kind`s of a `[[fence]]` table, in the order messages list them.
pub(super) const FENCE_KINDS: &[&str] = &["ssh", "signal", "script"];

/// Reads the rest of a fence table, whose `kind` was `kind`.
fn read_fence<'de, A: MapAccess<'de>>(kind: &str, rest: A) -> Result<FenceMethod, A::Error> {
    let rest = MapAccessDeserializer::new(rest);
    match kind {
        "ssh" => SshFence::deserialize(rest).map(FenceMethod::Ssh),
        "signal" => SignalFence::deserialize(rest).map(FenceMethod::Signal),
        "script" => ScriptFence::deserialize(rest).map(FenceMethod::Script),
        other => Err(de::Error::unknown_variant(other, FENCE_KINDS)),
    }
}

/// The keys of a fence table of `kind`: `kind` and its type's fields.
fn fence_fields(kind: &str) -> Option<Vec<&'static str>> {
    let fields = match kind {
        "ssh" => fields_of::<SshFence>(),
        "signal" => fields_of::<SignalFence>(),
        "script" => fields_of::<ScriptFence>(),
        _ => return None,
    };
    Some(
        std::iter::once("kind")
            .chain(fields.iter().copied())
            .collect(),
    )
}

/// Every table, the top level first.
pub(super) struct Schema {
    tables: Vec<Table>,
    /// Each fence kind and its keys.
    fences: Vec<(&'static str, Vec<&'static str>)>,
}

impl Schema {
    pub(super) fn new() -> Schema {
        Schema {
            tables: vec![
                table::<Config>(&[]),
                table::<ClusterConfig>(&["cluster"]),
                table::<CoordinationConfig>(&["coordination"]),
                table::<ZooKeeperConfig>(&["coordination", "zookeeper"]),
                table::<MysqlConfig>(&["coordination", "mysql"]),
                table::<RedisConfig>(&["coordination", "redis"]),
                table::<ElectionConfig>(&["election"]),
                table::<ServiceConfig>(&["service"]),
                table::<HealthConfig>(&["health"]),
                table::<ApiConfig>(&["api"]),
                table::<LogConfig>(&["log"]),
            ],
            fences: FENCE_KINDS
                .iter()
                .filter_map(|kind| Some((*kind, fence_fields(kind)?)))
                .collect(),
        }
    }

    fn table(&self, path: &KeyPath) -> Option<&Table> {
        self.tables.iter().find(|t| {
            t.path.len() == path.0.len()
                && t.path
                    .iter()
                    .zip(&path.0)
                    .all(|(a, b)| matches!(b, Seg::Key(k) if k == a))
        })
    }

    /// Whether the value at `path` must be a table: one of the schema's, or a `[[fence]]`.
    fn is_table(&self, path: &KeyPath) -> bool {
        self.table(path).is_some()
            || matches!(&path.0[..], [Seg::Key(k), Seg::Index(_)] if k == "fence")
    }

    fn fence(&self, kind: &str) -> Option<&[&'static str]> {
        self.fences
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, fields)| &fields[..])
    }

    /// Every table with the words that name it in a message (empty for the top level), so
    /// that a key written in the wrong table can be pointed to the right one.
    pub(super) fn labelled(&self) -> impl Iterator<Item = (String, &[&'static str])> {
        let tables = self.tables.iter().map(|t| {
            let label = match t.path {
                [] => String::new(),
                path => format!("[{}]", path.join(".")),
            };
            (label, t.fields)
        });
        let fences = self
            .fences
            .iter()
            .map(|(kind, fields)| (format!("a [[fence]] of kind = \"{kind}\""), &fields[..]));
        tables.chain(fences)
    }
}

/// [`Schema::labelled`] on its own, for the test that the reference config names every key.
#[cfg(test)]
pub(super) fn all_tables() -> Vec<(String, Vec<&'static str>)> {
    Schema::new()
        .labelled()
        .map(|(label, fields)| (label, fields.to_vec()))
        .collect()
}

pub(super) fn type_name(value: &DeValue<'_>) -> String {
    match value {
        DeValue::Integer(_) => "an integer".into(),
        DeValue::Array(_) => "an array".into(),
        other => format!("a {}", other.type_str()),
    }
}

/// `fence = [...]`: each table read by the type its `kind` names. The derived
/// `Deserialize` of [`FenceMethod`] (an internally tagged enum) buffers the whole table
/// before it looks at `kind`, and errors from the buffer have lost their key path and
/// place in the file; this reads `kind` first instead, which [`kind_first`] makes the
/// first key of every fence table.
pub(super) fn fences<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<FenceMethod>, D::Error> {
    d.deserialize_seq(Fences)
}

struct Fences;

impl<'de> de::Visitor<'de> for Fences {
    type Value = Vec<FenceMethod>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of tables, written [[fence]]")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(method) = seq.next_element_seed(Fence)? {
            out.push(method);
        }
        Ok(out)
    }
}

/// One `[[fence]]` table.
struct Fence;

impl<'de> DeserializeSeed<'de> for Fence {
    type Value = FenceMethod;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<FenceMethod, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> de::Visitor<'de> for Fence {
    type Value = FenceMethod;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a table")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FenceMethod, A::Error> {
        // `kind` comes first if it is there at all (kind_first).
        if map.next_key::<String>()?.as_deref() != Some("kind") {
            return Err(de::Error::missing_field("kind"));
        }
        let kind = map.next_value_seed(Choice(FENCE_KINDS))?;
        read_fence(kind, map)
    }
}

/// Reads a whole config (or the part of one that `root` holds), every fence table with its
/// `kind` first.
fn read_config(mut root: Spanned<DeTable<'_>>) -> Result<Config, PathError> {
    if let Some(DeValue::Array(items)) = root.get_mut().get_mut("fence").map(|f| f.get_mut()) {
        for item in items.iter_mut() {
            if let DeValue::Table(t) = item.get_mut() {
                *t = kind_first(t);
            }
        }
    }
    serde_path_to_error::deserialize(toml::de::Deserializer::from(root))
}

/// The key a "missing field" error names: serde's errors carry only their message, and
/// `serde::de::Error::missing_field` words it so.
fn missing_field(e: &toml::de::Error) -> Option<&str> {
    e.message()
        .strip_prefix("missing field `")?
        .strip_suffix('`')
}

/// serde's key path in our words.
fn key_path(path: &serde_path_to_error::Path) -> KeyPath {
    let mut out = KeyPath::default();
    for seg in path.iter() {
        match seg {
            serde_path_to_error::Segment::Seq { index } => out.0.push(Seg::Index(*index)),
            serde_path_to_error::Segment::Map { key } => out.0.push(Seg::Key(key.clone())),
            _ => {}
        }
    }
    out
}

/// The value at `path` below `value`.
fn value_at_mut<'v, 'a>(
    mut value: &'v mut Spanned<DeValue<'a>>,
    path: &[Seg],
) -> Option<&'v mut Spanned<DeValue<'a>>> {
    for seg in path {
        value = match (seg, value.get_mut()) {
            (Seg::Key(k), DeValue::Table(t)) => t.get_mut(k.as_str())?,
            (Seg::Index(i), DeValue::Array(a)) => a.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(value)
}

/// `table` with its `kind` key first, for [`Fence`].
fn kind_first<'a>(table: &DeTable<'a>) -> DeTable<'a> {
    let kind = table.get_key_value("kind");
    let rest = table.iter().filter(|(k, _)| k.get_ref() != "kind");
    kind.into_iter()
        .chain(rest)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

impl<'a> Source<'a> {
    /// Steps 2 and 3: the unknown keys, then serde. serde reads the file in order
    /// (toml's `preserve_order`) and stops at its first error: the first wrong value in
    /// the file, or a required key missing from a table, found where that table ends.
    pub(super) fn read(&self) -> Result<Config, ConfigError> {
        let mut unknown = Findings::default();
        self.find_unknown_keys(self.doc.get_ref(), &KeyPath::default(), &mut unknown);
        if let Some(error) = unknown.into_error() {
            return Err(error);
        }
        read_config(self.doc.clone()).map_err(|e| self.serde_error(key_path(e.path()), e.inner()))
    }

    /// A serde error at `path` as a [`ConfigError`], with its rank and place in the file.
    /// serde says what went wrong in the words of `serde::de::Error`'s messages, the only
    /// thing its errors carry: "missing field `x`", "invalid type: ..., expected ...", and
    /// otherwise the reason [`values`] gave.
    fn serde_error(&self, path: KeyPath, e: &toml::de::Error) -> ConfigError {
        // A table that holds something else: serde would report it as a field of the value
        // (an array read as a struct's fields) or name the Rust type ("struct Config").
        for n in 1..=path.0.len() {
            let outer = KeyPath(path.0[..n].to_vec());
            if !self.schema.is_table(&outer) {
                continue;
            }
            if let Some(value) = self.value_at(&outer) {
                if !matches!(value.get_ref(), DeValue::Table(_)) {
                    return self.wrong_type(&outer, value, "a table");
                }
            }
        }
        if let Some(field) = missing_field(e) {
            return self.missing(&path, field);
        }
        if let Some(e) = self.overflowed(&path, e) {
            return self.serde_error(path, &e);
        }
        let message = e.message();
        let expected = message
            .strip_prefix("invalid type: ")
            .and_then(|m| m.rsplit_once(", expected "));
        if let (Some((_, expected)), Some(value)) = (expected, self.value_at(&path)) {
            return self.wrong_type(&path, value, expected);
        }
        let span = self.span_at(&path);
        // Only a message about a number carries WRITTEN or DIGITS, at its start: elsewhere
        // the character may be the value's own.
        let written = self.text.get(span.clone()).unwrap_or_default();
        let reason = if message.starts_with(&format!("= {}", values::WRITTEN)) {
            message.replace(values::WRITTEN, written)
        } else if message.starts_with(&format!("= {}", values::DIGITS)) {
            let digits = match self.value_at(&path).map(|v| v.get_ref()) {
                Some(DeValue::Integer(i)) => i.as_str(),
                _ => written,
            };
            message.replace(values::DIGITS, digits)
        } else {
            message.to_string()
        };
        // The reasons of `values` follow the key; anything else is quoted as serde said it.
        let reason = if reason.starts_with("= ") || reason.starts_with("is not valid: ") {
            reason
        } else {
            format!("is not valid: {}", reason.trim())
        };
        ConfigError::Invalid {
            at: self.location(span.start),
            key: path.to_string(),
            reason: one_line(&reason).into_owned(),
        }
    }

    /// toml refuses a number too large for serde's types before the key's function in
    /// [`values`] sees it. The largest number toml does hand over stands in for it, so that
    /// the function says what it says of a large number (the message names the number as
    /// written, through [`values::WRITTEN`] or [`values::DIGITS`]).
    fn overflowed(&self, path: &KeyPath, e: &toml::de::Error) -> Option<toml::de::Error> {
        let stand_in = match e.message() {
            "integer number overflowed" => "x = 340282366920938463463374607431768211455",
            "floating-point number overflowed" => "x = 1.7976931348623157e308",
            _ => return None,
        };
        let stand_in = DeTable::parse(stand_in).ok()?.into_inner().remove("x")?;
        let (Seg::Key(top), inner) = path.0.split_first()? else {
            return None;
        };
        let (key, value) = self.doc.get_ref().get_key_value(top.as_str())?;
        let mut value = value.clone();
        let target = value_at_mut(&mut value, inner)?;
        *target = Spanned::new(target.span(), stand_in.into_inner());
        let alone: DeTable<'_> = std::iter::once((key.clone(), value)).collect();
        let e = read_config(Spanned::new(self.doc.span(), alone)).err()?;
        let same = key_path(e.path()).to_string() == path.to_string();
        same.then(|| e.into_inner())
    }

    fn wrong_type(
        &self,
        path: &KeyPath,
        value: &Spanned<DeValue<'_>>,
        expected: &str,
    ) -> ConfigError {
        ConfigError::WrongType {
            at: self.location(value.span().start),
            key: path.to_string(),
            expected: expected.to_string(),
            found: type_name(value.get_ref()),
        }
    }

    /// `field` is missing from the table at `path`.
    fn missing(&self, path: &KeyPath, field: &str) -> ConfigError {
        let key = path.key(field);
        let what = if self.schema.table(&key).is_some() {
            format!("table [{key}]")
        } else if path.is_root() {
            format!("key `{field}`")
        } else if field == "kind" && matches!(path.0.last(), Some(Seg::Index(_))) {
            format!("key `kind` in {path}: one of {}", quoted_list(FENCE_KINDS))
        } else {
            let label = match self.value_at(path).map(|v| v.get_ref()) {
                Some(DeValue::Table(t)) => self.table_label(path, t),
                _ => format!("in [{path}]"),
            };
            format!("key `{field}` {label}")
        };
        ConfigError::MissingKey {
            at: self.location(self.span_at(path).start),
            key: key.to_string(),
            what: one_line(&what).into_owned(),
        }
    }

    /// Every key of `table` (at `path`) and the tables in it that no serde type of the
    /// schema has: the first in the file is reported and the rest counted. One pass over
    /// the keys: a file of 100,000 unknown keys is refused at once (issue 11). By hand
    /// rather than with `serde_ignored` or serde's own "unknown field" error: both come
    /// only as far as serde's first error, and an unknown key (most likely a typo, which
    /// also makes the intended key look missing) is reported before any other.
    fn find_unknown_keys(&self, table: &DeTable<'_>, path: &KeyPath, found: &mut Findings) {
        let fields: Vec<&str> = match (path.0.last(), self.schema.table(path)) {
            (_, Some(t)) => t.fields.to_vec(),
            (Some(Seg::Index(_)), None) => {
                // A fence of no known kind is reported by its `kind` alone: without a
                // schema its other keys cannot be judged.
                let kind = table.get("kind").and_then(|k| k.get_ref().as_str());
                match kind.and_then(|k| self.schema.fence(k)) {
                    Some(fields) => fields.to_vec(),
                    None => return,
                }
            }
            _ => return,
        };
        for (key, value) in table.iter() {
            let name: &str = key.get_ref();
            if !fields.contains(&name) {
                found.push(key.span().start, || {
                    self.unknown_key(path, table, name, &fields, key.span().start)
                });
                continue;
            }
            let inner = path.key(name);
            match value.get_ref() {
                DeValue::Table(t) if self.schema.table(&inner).is_some() => {
                    self.find_unknown_keys(t, &inner, found)
                }
                DeValue::Array(items) if path.is_root() && name == "fence" => {
                    for (i, item) in items.iter().enumerate() {
                        if let DeValue::Table(t) = item.get_ref() {
                            self.find_unknown_keys(t, &inner.index(i), found);
                        }
                    }
                }
                _ => {}
            }
        }
    }

    fn unknown_key(
        &self,
        path: &KeyPath,
        table: &DeTable<'_>,
        name: &str,
        fields: &[&str],
        start: usize,
    ) -> ConfigError {
        let script = table.get("kind").and_then(|k| k.get_ref().as_str()) == Some("script")
            && matches!(path.0.last(), Some(Seg::Index(_)));
        ConfigError::UnknownKey {
            at: self.location(start),
            key: path.key(name).to_string(),
            name: name.to_string(),
            context: one_line(&format!(
                "{}{}",
                self.table_label(path, table),
                self.unknown_key_hint(name, fields, script)
            ))
            .into_owned(),
        }
    }

    /// `; did you mean `x`?`, `; `x` belongs in [a.b]`, or the list of valid keys.
    fn unknown_key_hint(&self, name: &str, fields: &[&str], script_fence: bool) -> String {
        if let Some(near) = nearest(name, fields.iter().copied()) {
            return format!("; did you mean `{near}`?");
        }
        let elsewhere: Vec<String> = self
            .schema
            .labelled()
            .filter(|(_, fs)| fs.contains(&name))
            .map(|(label, _)| {
                if label.is_empty() {
                    "at the top level, before the first [table]".to_string()
                } else {
                    format!("in {label}")
                }
            })
            .collect();
        if !elsewhere.is_empty() {
            return format!("; `{name}` belongs {}", elsewhere.join(" or "));
        }
        let agent = if script_fence {
            " (a fence agent's settings go in `options = { ... }`)"
        } else {
            ""
        };
        format!("; valid keys here: {}{agent}", fields.join(", "))
    }

    /// `in [coordination.zookeeper]`, `in fence[1] (kind = "ssh")`, `at the top level`.
    pub(super) fn table_label(&self, path: &KeyPath, table: &DeTable<'_>) -> String {
        if path.is_root() {
            return "at the top level".to_string();
        }
        if matches!(path.0.last(), Some(Seg::Index(_))) {
            return match table.get("kind").and_then(|k| k.get_ref().as_str()) {
                Some(kind) => format!("in {path} (kind = {})", quoted(kind)),
                None => format!("in {path}"),
            };
        }
        format!("in [{path}]")
    }
}
