//! What the settings table (in [`super`]) becomes inside the library: each
//! settings struct with its `Default`, and its serde form, a flat map of
//! keys where a part's keys (`..ClientConfig`) sit beside its own. The
//! worker's TOML file is that form of [`WorkerConfig`](super::WorkerConfig).
//!
//! The flat form is read here by hand rather than with `#[serde(flatten)]`:
//! a flattened part is read from a buffer after the map is done, so a TOML
//! error in it would lose its line and its key's name. Here every key is
//! checked as the format reads it (an unknown key fails with the key's
//! position) and every value is read by the format's own deserializer (a
//! wrongly typed value fails with the value's position).

use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

use super::{CronConfig, PostgresConfig};
use crate::wire::Propagation;
use crate::wire::duration::{human, human_opt};

/// Turns the settings table into the settings structs, their `Default`s
/// and their flat serde form (see the table's own doc for its grammar).
macro_rules! settings_structs {
    ($(
        $(#[doc = $gdoc:literal])*
        $vis:vis $kind:ident $group:ident $(in $($seg:ident).+)? {$(
            $(#[doc = $doc:literal])*
            $field:ident $(: ..$part:ty)? $(: $ty:ty)? $(= $default:expr)?
            $(, file $file:literal)?
            $(, builder $builder:tt)?
            $(, global $gkind:ident $gflag:tt)?
            $(, run $rkind:ident $rflag:tt)?
        ;)*}
    )*) => {$(
        $crate::config::flat::settings_struct! {
            $kind [$(#[doc = $gdoc])*] $vis $group [$($($seg)+)?] {$(
                [$(#[doc = $doc])*] $field: $($part)? $($ty)? $(= $default)?,
            )*}
        }

        impl $crate::config::flat::Flat for $group {
            fn keys(file: bool) -> &'static [&'static str] {
                use $crate::config::flat;
                static OWN: flat::Keys = flat::Keys::new();
                static FILE: flat::Keys = flat::Keys::new();
                (if file { &FILE } else { &OWN }).get_or_init(|| {
                    let mut keys = Vec::new();
                    $({
                        let _name = flat::name(file, stringify!($field), &[$($file)?]);
                        $( keys.extend_from_slice(<$part as flat::Flat>::keys(file)); )?
                        $( flat::value_key::<$ty>(&mut keys, _name); )?
                    })*
                    keys
                })
            }

            fn read<'de, A: ::serde::de::MapAccess<'de>>(
                &mut self,
                file: bool,
                key: &str,
                map: &mut A,
            ) -> Result<bool, A::Error> {
                use $crate::config::flat;
                $({
                    let _name = flat::name(file, stringify!($field), &[$($file)?]);
                    $(
                        if <$part as flat::Flat>::read(&mut self.$field, file, key, map)? {
                            return Ok(true);
                        }
                    )?
                    $(
                        if flat::read_value::<$ty, A>(&mut self.$field, _name, key, map)? {
                            return Ok(true);
                        }
                    )?
                })*
                Ok(false)
            }

            fn write<M: ::serde::ser::SerializeMap>(
                &self,
                file: bool,
                map: &mut M,
            ) -> Result<(), M::Error> {
                use $crate::config::flat;
                $({
                    let _name = flat::name(file, stringify!($field), &[$($file)?]);
                    $( <$part as flat::Flat>::write(&self.$field, file, map)?; )?
                    $( flat::write_value::<$ty, M>(map, _name, &self.$field)?; )?
                })*
                Ok(())
            }
        }

        impl $crate::config::flat::Part<$group> for $crate::config::WorkerConfig {
            fn part(&mut self) -> &mut $group {
                &mut (*self) $($(.$seg)+)?
            }
        }
    )*};
}
pub(super) use settings_structs;

/// One struct of the table: defined here (`pub struct`), with its
/// `Default` and serde form; or defined elsewhere (`impl`, the broker's
/// `ConnectOptions`), which only lends its keys to the flat form.
macro_rules! settings_struct {
    (
        struct [$($gdoc:tt)*] $vis:vis $group:ident [$($seg:ident)*] {$(
            [$($doc:tt)*] $field:ident : $ty:ty = $default:expr,
        )*}
    ) => {
        $($gdoc)*
        #[derive(Debug, Clone, PartialEq)]
        $vis struct $group {$(
            $($doc)*
            pub $field: $ty,
        )*}

        impl Default for $group {
            fn default() -> Self {
                $group {$( $field: $default, )*}
            }
        }

        impl ::serde::Serialize for $group {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                // The root of the table (no path) is the worker's file.
                $crate::config::flat::serialize(self, stringify!($($seg)*).is_empty(), s)
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $group {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let file = stringify!($($seg)*).is_empty();
                $crate::config::flat::deserialize(d, stringify!($group), file)
            }
        }
    };
    (impl $($rest:tt)*) => {};
}
pub(super) use settings_struct;

/// A settings struct in its flat form. `file` chooses the names the
/// worker's file gives its keys (`metrics_top_k`, `max_enqueue_bytes`)
/// over the struct's own (`top_k`, `max_payload_bytes`).
pub(crate) trait Flat {
    /// Every key, its parts' included.
    fn keys(file: bool) -> &'static [&'static str];
    /// Reads the value of `key` (one of [`Flat::keys`]) into its setting;
    /// `false` when the key is not this struct's.
    fn read<'de, A: MapAccess<'de>>(
        &mut self,
        file: bool,
        key: &str,
        map: &mut A,
    ) -> Result<bool, A::Error>;
    /// Writes every setting as a key and its value.
    fn write<M: SerializeMap>(&self, file: bool, map: &mut M) -> Result<(), M::Error>;
}

/// The part of a [`WorkerConfig`](super::WorkerConfig) that holds the
/// settings struct `G` (`client.connect` for `ConnectOptions`), so a setter
/// or a flag generated from the table reaches its field. Not a public API.
pub trait Part<G> {
    /// The part.
    fn part(&mut self) -> &mut G;
}

/// A setting's key: the file's name when asked and the table gives one.
pub(crate) fn name(file: bool, field: &'static str, file_name: &[&'static str]) -> &'static str {
    match file_name {
        [name] if file => name,
        _ => field,
    }
}

/// The keys of a struct in one form, gathered once.
pub(crate) type Keys = OnceLock<Vec<&'static str>>;

/// Adds a setting's key, its type checked to have a serde form ([`Value`]).
pub(crate) fn value_key<T: Value>(keys: &mut Vec<&'static str>, name: &'static str) {
    keys.push(name);
}

/// Reads the value of `key` into `setting` if `key` is its `name`.
pub(crate) fn read_value<'de, T: Value, A: MapAccess<'de>>(
    setting: &mut T,
    name: &str,
    key: &str,
    map: &mut A,
) -> Result<bool, A::Error> {
    if key != name {
        return Ok(false);
    }
    *setting = map.next_value_seed(Seed::<T>(PhantomData))?;
    Ok(true)
}

/// Writes a setting as its key and value.
pub(crate) fn write_value<T: Value, M: SerializeMap>(
    map: &mut M,
    name: &'static str,
    setting: &T,
) -> Result<(), M::Error> {
    map.serialize_entry(name, &Ser(setting))
}

/// Serializes a settings struct as a flat map.
pub(crate) fn serialize<T: Flat, S: Serializer>(
    value: &T,
    file: bool,
    s: S,
) -> Result<S::Ok, S::Error> {
    let mut map = s.serialize_map(Some(T::keys(file).len()))?;
    value.write(file, &mut map)?;
    map.end()
}

/// Reads a settings struct from a flat map: its defaults, then each key
/// given. An unknown or repeated key is an error.
pub(crate) fn deserialize<'de, T: Flat + Default, D: Deserializer<'de>>(
    d: D,
    name: &'static str,
    file: bool,
) -> Result<T, D::Error> {
    struct FlatVisitor<T>(bool, PhantomData<T>);

    impl<'de, T: Flat + Default> Visitor<'de> for FlatVisitor<T> {
        type Value = T;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a table of settings")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
            let file = self.0;
            let keys = T::keys(file);
            let mut value = T::default();
            let mut seen = Vec::new();
            while let Some(key) = map.next_key_seed(Key(keys))? {
                if seen.contains(&key) {
                    return Err(de::Error::duplicate_field(key));
                }
                seen.push(key);
                value.read(file, key, &mut map)?;
            }
            Ok(value)
        }
    }

    d.deserialize_struct(name, T::keys(file), FlatVisitor(file, PhantomData))
}

/// Reads a key, failing on one that is not among these (while the format
/// still knows where the key stands).
struct Key(&'static [&'static str]);

impl<'de> DeserializeSeed<'de> for Key {
    type Value = &'static str;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<&'static str, D::Error> {
        d.deserialize_identifier(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = &'static str;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a setting's name")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<&'static str, E> {
        self.0
            .iter()
            .find(|k| **k == v)
            .copied()
            .ok_or_else(|| E::unknown_field(v, self.0))
    }
}

/// How a setting's value is written in the serde form: as serde does, but
/// durations as humantime text (`"25s"`). A setting of a type not listed
/// below adds its type to `by_serde!`.
pub(crate) trait Value: Sized {
    /// Reads the value.
    fn de<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error>;
    /// Writes the value.
    fn ser<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error>;
}

macro_rules! by_serde {
    ($($t:ty),* $(,)?) => {$(
        impl Value for $t {
            fn de<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                <$t>::deserialize(d)
            }
            fn ser<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                self.serialize(s)
            }
        }
    )*};
}

by_serde!(
    bool,
    u32,
    usize,
    String,
    Option<String>,
    Option<PathBuf>,
    Vec<String>,
    Vec<Vec<String>>,
    Propagation,
    Vec<CronConfig>,
    PostgresConfig,
);

impl Value for Duration {
    fn de<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        human::deserialize(d)
    }
    fn ser<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        human::serialize(self, s)
    }
}

impl Value for Option<Duration> {
    fn de<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        human_opt::deserialize(d)
    }
    fn ser<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        human_opt::serialize(self, s)
    }
}

/// Reads one setting's value.
struct Seed<T>(PhantomData<T>);

impl<'de, T: Value> DeserializeSeed<'de> for Seed<T> {
    type Value = T;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        T::de(d)
    }
}

/// Writes one setting's value.
struct Ser<'a, T>(&'a T);

impl<T: Value> Serialize for Ser<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.ser(s)
    }
}
