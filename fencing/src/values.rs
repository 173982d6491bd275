//! How the config's values are read: the serde functions its fields name in
//! `deserialize_with`, here because both warden's tables and the `[[fence]]` tables use
//! them. Each refuses what warden cannot use and says why, in the words warden's config
//! errors promise: `expecting` names the type a wrong value should have been ("an array of
//! strings"), and a refused value's message is what follows the key, starting with `= `
//! and the value ("= 5 is out of range: it must be from 1 to 65535") or with `is not
//! valid: `. The loader tells these from serde's own messages by those starts.
//!
//! serde's own impls would take most of these values, but with messages about Rust types
//! (`u16`, "a sequence") and without the checks: units on durations, no NUL in a string,
//! a signal that ends a process.

use crate::SignalName;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

/// Stands in a message for the value as written in the file, which only the loader sees
/// (a deserializer gets `5.0` as the number 5): the loader puts the text in its place in a
/// message that starts with `= ` and this marker.
pub const WRITTEN: &str = "\u{0}";

/// Stands, as [`WRITTEN`] does, for an integer's digits as toml read them (`10000` for
/// `0x10000`, without the radix's prefix).
pub const DIGITS: &str = "\u{1}";

/// A string, refused if it holds a NUL: no file name, program, host or argument can, and a
/// C library call would silently cut the value short at it.
pub fn text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    d.deserialize_str(Parsed("a string", |s| {
        if s.contains('\0') {
            return Err(format!(
                "= {s:?} contains a NUL character (\\u0000), which no name, path or argument \
                 can hold: remove it"
            ));
        }
        Ok(s.to_string())
    }))
}

/// [`text`] for an optional key.
pub fn opt_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    text(d).map(Some)
}

/// A file name: a string as [`text`].
pub fn path<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
    text(d).map(PathBuf::from)
}

/// [`path`] for an optional key.
pub fn opt_path<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
    path(d).map(Some)
}

/// A program and its arguments, or any list of strings: each as [`text`].
pub fn strings<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    d.deserialize_seq(Strings)
}

/// [`strings`] for an optional key.
pub fn opt_strings<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    strings(d).map(Some)
}

/// A table of strings (a fence agent's options), each value as [`text`].
pub fn string_map<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    d.deserialize_map(StringMap)
}

/// A TCP port: 1 to 65535 (0 asks the kernel for any port, which a peer cannot find).
pub fn port<'de, D: Deserializer<'de>>(d: D) -> Result<u16, D::Error> {
    int_in(d, 1, 65535).map(|n| n as u16)
}

/// [`port`] for an optional key.
pub fn opt_port<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u16>, D::Error> {
    port(d).map(Some)
}

/// A count of checks, at least 1.
pub fn count<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    int_in(d, 1, i64::from(u32::MAX)).map(|n| n as u32)
}

/// A number of replicas to wait for: 0 (none) to 100.
pub fn replicas<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    int_in(d, 0, 100).map(|n| n as u32)
}

/// An election priority (SPEC §6): 0 to 1000.
pub fn priority<'de, D: Deserializer<'de>>(d: D) -> Result<u16, D::Error> {
    int_in(d, 0, 1000).map(|n| n as u16)
}

/// A data position or a difference of two (SPEC §6b `election.max_lag`): a non-negative
/// integer (TOML's integers end at 2^63 - 1).
pub fn opt_position<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    int_in(d, 0, i64::MAX).map(|n| Some(n as u64))
}

/// A signal that ends a process: `"SIGTERM"`, `"TERM"` or `"15"`.
pub fn signal<'de, D: Deserializer<'de>>(d: D) -> Result<SignalName, D::Error> {
    d.deserialize_str(Parsed("a signal name such as \"SIGTERM\"", |s| {
        let signal = SignalName::from_str(s).map_err(|reason| format!("is not valid: {reason}"))?;
        match cannot_end_a_process(signal.0) {
            Some(why) => Err(format!(
                "= {s:?} cannot end a process: {} {why}; use a signal that ends it, such as \
                 \"SIGTERM\" or \"SIGKILL\"",
                signal.0.as_str()
            )),
            None => Ok(signal),
        }
    }))
}

/// A signal for the `signal` fence: one that ends a process ([`signal`]) and that a
/// warden does not ignore ([`warden_ignores`]): the fence signals the old incarnation's
/// warden as well as its service, and a warden that shrugs SIGHUP off is never fenced by
/// it (the chain fails with "still running" and the cluster has no active).
pub fn fence_signal<'de, D: Deserializer<'de>>(d: D) -> Result<SignalName, D::Error> {
    d.deserialize_str(Parsed("a signal name such as \"SIGTERM\"", |s| {
        let signal = SignalName::from_str(s).map_err(|reason| format!("is not valid: {reason}"))?;
        fence_signal_refusal(signal.0).map_or(Ok(signal), |why| Err(format!("= {s:?} {why}")))
    }))
}

/// Why `signal` cannot be a fence's signal, in words that follow its name.
pub fn fence_signal_refusal(signal: nix::sys::signal::Signal) -> Option<String> {
    if let Some(why) = cannot_end_a_process(signal) {
        return Some(format!(
            "cannot end a process: {} {why}; use a signal that ends it, such as \"SIGTERM\" \
             or \"SIGKILL\"",
            signal.as_str()
        ));
    }
    warden_ignores(signal).then(|| {
        format!(
            "cannot fence a warden: `warden run` logs {} and ignores it (a stray `kill` must \
             not end an active without a handover); use \"SIGKILL\" (the default) or \
             \"SIGTERM\"",
            signal.as_str()
        )
    })
}

/// The signals `warden run` logs and ignores (src/launch.rs `STRAY`, and the realtime
/// ones, which nix does not name): every signal whose default ends a process and that
/// the kernel does not send a broken process.
pub fn warden_ignores(signal: nix::sys::signal::Signal) -> bool {
    use nix::sys::signal::Signal::*;
    matches!(
        signal,
        SIGHUP
            | SIGUSR1
            | SIGUSR2
            | SIGALRM
            | SIGVTALRM
            | SIGPROF
            | SIGIO
            | SIGPWR
            | SIGSTKFLT
            | SIGXCPU
            | SIGXFSZ
    )
}

/// An IP address and port; names are not resolved.
pub fn socket_addr<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    const EXPECTING: &str = "an address and port such as \"127.0.0.1:7232\"";
    d.deserialize_str(Parsed(EXPECTING, |s| {
        s.parse().map_err(|_| {
            format!(
                "= {s:?} is not an IP address and port such as \"127.0.0.1:7232\" (names \
                 are not resolved here)"
            )
        })
    }))
}

/// One of a unit enum's names, with the nearest suggested for a typo. The names are the
/// enum's own, learnt from its `Deserialize` (see [`variants_of`]).
pub fn choice<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    let choices = variants_of::<T>();
    let name = d.deserialize_str(Choice(choices))?;
    T::deserialize(de::value::StrDeserializer::<D::Error>::new(name))
}

/// A table read as the struct `T`. serde's derived struct also takes an array, as its
/// fields in order, so that `log = []` would be read as a `[log]` of defaults.
pub fn table<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    d.deserialize_map(Table(PhantomData))
}

/// [`table`] for an optional table.
pub fn opt_table<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    table(d).map(Some)
}

struct Table<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for Table<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a table")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::deserialize(de::value::MapAccessDeserializer::new(map))
    }
}

/// A duration that must be written with a unit; bounds are the loader's (they differ by
/// key). Serialized as humantime writes it.
pub mod duration {
    use super::*;

    /// A string such as `"5s"` or `"1m 30s"`; a bare number is refused.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        d.deserialize_str(DurationVisitor)
    }

    /// As humantime writes it, which [`deserialize`] reads back.
    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        humantime_serde::serialize(d, s)
    }
}

/// A humantime duration that insists on a unit: a bare `"10"` is refused, since nobody
/// can tell whether it meant seconds or milliseconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if !t.is_empty() && t.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(format!(
            "= \"{s}\" has no unit: add one, such as \"{t}s\" or \"{t}ms\""
        ));
    }
    humantime::parse_duration(t).map_err(|e| {
        format!(
            "= \"{s}\" is not a duration ({e}): write it with a unit, such as \"5s\" or \"250ms\""
        )
    })
}

/// Why a signal cannot stop a service or fence a process: by default it suspends, resumes
/// or is ignored, so a process that does not handle it keeps running. (SIGKILL after
/// `stop_timeout` would still end a service, but only after a pointless wait.)
pub fn cannot_end_a_process(signal: nix::sys::signal::Signal) -> Option<&'static str> {
    use nix::sys::signal::Signal::*;
    match signal {
        SIGSTOP | SIGTSTP | SIGTTIN | SIGTTOU => Some("only suspends a process"),
        SIGCONT => Some("only resumes a suspended process"),
        // SIGURG and SIGWINCH are ignored by default too, but some services stop on them
        // (Apache httpd's graceful stop is SIGWINCH), and SIGKILL follows anyway: allowed.
        SIGCHLD => Some("is ignored by a process that does not handle it"),
        _ => None,
    }
}

/// `from 1 to 65535`, or `at least 1` where the maximum is the type's own (noise).
pub fn int_range(min: i64, max: i64) -> String {
    if max >= i64::from(u32::MAX) {
        format!("at least {min}")
    } else {
        format!("from {min} to {max}")
    }
}

/// `"a", "b" or "c"`.
pub fn quoted_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("\"{s}\"")).collect();
    match quoted.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => quoted.join(""),
    }
}

/// The closest of `candidates` to a misspelt `word`, if one is close enough to be the
/// likely intent.
pub fn nearest<'c>(word: &str, candidates: impl IntoIterator<Item = &'c str>) -> Option<&'c str> {
    let norm = |s: &str| s.to_ascii_lowercase().replace('-', "_");
    let word_n = norm(word);
    candidates
        .into_iter()
        .map(|c| (strsim::osa_distance(&word_n, &norm(c)), c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// The field names of a serde struct, in the order they are declared.
pub fn fields_of<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    let mut probe = Probe::default();
    let _ = T::deserialize(&mut probe);
    probe.fields
}

/// The names of a unit enum's variants, as written in the file.
pub fn variants_of<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    let mut probe = Probe::default();
    let _ = T::deserialize(&mut probe);
    probe.variants
}

/// A deserializer that reads nothing and records the names a derived `Deserialize` passes
/// to `deserialize_struct` or `deserialize_enum`: the schema, as serde knows it. (The
/// serde-aux crate's `serde_introspect` does this for structs only.)
#[derive(Default)]
struct Probe {
    fields: &'static [&'static str],
    variants: &'static [&'static str],
}

impl<'de> Deserializer<'de> for &mut Probe {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("probed"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        self.fields = fields;
        Err(de::Error::custom("probed"))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        variants: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        self.variants = variants;
        Err(de::Error::custom("probed"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
        byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map
        identifier ignored_any
    }
}

/// An integer within `min..=max` (so that the callers' casts to narrower types are exact).
fn int_in<'de, D: Deserializer<'de>>(d: D, min: i64, max: i64) -> Result<i64, D::Error> {
    d.deserialize_i64(Int { min, max })
}

struct Int {
    min: i64,
    max: i64,
}

impl Visitor<'_> for Int {
    type Value = i64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an integer {}", int_range(self.min, self.max))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<i64, E> {
        if (self.min..=self.max).contains(&n) {
            Ok(n)
        } else {
            Err(self.out_of_range())
        }
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<i64, E> {
        self.visit_i128(i128::from(n))
    }

    fn visit_i128<E: de::Error>(self, n: i128) -> Result<i64, E> {
        match i64::try_from(n) {
            Ok(n) => self.visit_i64(n),
            Err(_) => Err(self.out_of_range()),
        }
    }

    fn visit_u128<E: de::Error>(self, _: u128) -> Result<i64, E> {
        Err(self.out_of_range())
    }
}

impl Int {
    fn out_of_range<E: de::Error>(&self) -> E {
        E::custom(format_args!(
            "= {DIGITS} is out of range: it must be {}",
            int_range(self.min, self.max)
        ))
    }
}

/// A string, read by `.1`, which says why it refuses one; `.0` is what a value of another
/// type should have been.
struct Parsed<T>(&'static str, fn(&str) -> Result<T, String>);

impl<T> Visitor<'_> for Parsed<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<T, E> {
        (self.1)(s).map_err(E::custom)
    }
}

/// [`text`] as a seed, for the items of lists and tables.
struct TextSeed;

impl<'de> DeserializeSeed<'de> for TextSeed {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        text(d)
    }
}

struct Strings;

impl<'de> Visitor<'de> for Strings {
    type Value = Vec<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of strings")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
        let mut out = Vec::new();
        while let Some(s) = seq.next_element_seed(TextSeed)? {
            out.push(s);
        }
        Ok(out)
    }
}

struct StringMap;

/// The key of the one-key table as which toml passes a datetime to serde.
const TOML_DATETIME: &str = "$__toml_private_datetime";

impl<'de> Visitor<'de> for StringMap {
    type Value = BTreeMap<String, String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a table of strings")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = BTreeMap::new();
        while let Some(key) = map.next_key::<String>()? {
            // toml hands a datetime to a visitor as a table of this one key.
            if key == TOML_DATETIME {
                return Err(de::Error::invalid_type(
                    de::Unexpected::Other("a datetime"),
                    &self,
                ));
            }
            let value = map.next_value_seed(TextSeed)?;
            out.insert(key, value);
        }
        Ok(out)
    }
}

struct DurationVisitor;

impl DurationVisitor {
    fn no_unit<E: de::Error>() -> E {
        E::custom(format_args!(
            "= {WRITTEN} has no unit: write a string with a unit, such as \"{WRITTEN}s\" or \
             \"250ms\""
        ))
    }
}

impl Visitor<'_> for DurationVisitor {
    type Value = Duration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration with a unit, such as \"5s\" or \"250ms\"")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Duration, E> {
        parse_duration(s).map_err(E::custom)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Duration, E> {
        Err(Self::no_unit())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Duration, E> {
        Err(Self::no_unit())
    }

    fn visit_i128<E: de::Error>(self, _: i128) -> Result<Duration, E> {
        Err(Self::no_unit())
    }

    fn visit_u128<E: de::Error>(self, _: u128) -> Result<Duration, E> {
        Err(Self::no_unit())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Duration, E> {
        Err(Self::no_unit())
    }
}

/// One of the names in `.0`, read as a string; anything else is refused with the list and
/// the nearest name. [`choice`] uses it for enums, warden for a fence's `kind`.
pub struct Choice(pub &'static [&'static str]);

impl Visitor<'_> for Choice {
    type Value = &'static str;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "one of {}", quoted_list(self.0))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<&'static str, E> {
        if let Some(name) = self.0.iter().find(|c| **c == s) {
            return Ok(name);
        }
        let hint = match nearest(s, self.0.iter().copied()) {
            Some(near) => format!("; did you mean \"{near}\"?"),
            None => String::new(),
        };
        Err(E::custom(format_args!(
            "= {s:?} is not one of {}{hint}",
            quoted_list(self.0)
        )))
    }
}

impl<'de> DeserializeSeed<'de> for Choice {
    type Value = &'static str;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<&'static str, D::Error> {
        d.deserialize_str(self)
    }
}
