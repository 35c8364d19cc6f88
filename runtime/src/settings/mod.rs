//! Every configuration key of `keel-controller` and `keel-broker`, declared once in
//! [`SETTINGS`] (name, Kafka name, type, range, unit, default, doc, which binaries read it),
//! and the one loader both binaries use.
//!
//! A key `broker_session_timeout_ms` is read from the TOML file (`--config FILE`), from the
//! environment variable `KEEL_BROKER_SESSION_TIMEOUT_MS` and from the flag
//! `--broker-session-timeout-ms`; flag > env > file > default. The clap command
//! ([`Schema::command`]), the file reader ([`Schema::parse_toml`]), the validation
//! ([`Schema::resolve`]), the README tables ([`markdown_table`]) and the variables that
//! `keelctl cluster up` records ([`env_names`]) are all generated from the declaration, so a
//! new key is one entry of [`SETTINGS`] plus the field of the typed config that uses it.
//!
//! Validation is by kind, the same for both binaries: a [`Kind::Duration`] is 1..=one day in
//! its unit, a [`Kind::Int`] lies in its declared range, addresses parse as `ip:port` or
//! `host:port`, a [`Kind::Choice`] is one of its words. Rules that tie several keys together
//! (a session timeout above the heartbeat interval) stay with the binary's typed config.
//! Every error is one line naming the key ([`ConfigError`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command, value_parser};

use crate::LogFormat;
use crate::config_file::{ConfigFileError, parse_toml_seed};

mod keys;
pub mod listeners;
pub use keys::SETTINGS;

/// Prefix of every setting's environment variable.
pub const ENV_PREFIX: &str = "KEEL_";
/// Environment variable naming the config file (the `--config` flag).
pub const CONFIG_ENV: &str = "KEEL_CONFIG";

/// Why a configuration was refused. `Display` is the one line printed at start-up.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read, is not valid TOML, has an unknown key or a value
    /// of the wrong type (one line naming the file, the key and the line).
    #[error(transparent)]
    File(#[from] ConfigFileError),
    /// A key has a value outside its domain.
    #[error("invalid value for {key}: {reason}")]
    Invalid {
        /// The key (config name).
        key: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A required key is missing.
    #[error("missing required config {key}")]
    Missing {
        /// The key.
        key: &'static str,
    },
}

/// A Keel server binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Binary {
    /// `keel-controller`.
    Controller,
    /// `keel-broker`.
    Broker,
}

impl Binary {
    /// Both binaries.
    pub const ALL: [Binary; 2] = [Binary::Controller, Binary::Broker];

    /// The program name (`keel-controller`), which prefixes its error lines.
    pub const fn program(self) -> &'static str {
        match self {
            Binary::Controller => "keel-controller",
            Binary::Broker => "keel-broker",
        }
    }

    /// The `--help` summary.
    pub const fn about(self) -> &'static str {
        match self {
            Binary::Controller => "Keel controller: one voter of the metadata quorum",
            Binary::Broker => "Keel broker",
        }
    }

    /// The log filter used when `KEEL_LOG` is unset. openraft's own lines are off: it logs
    /// every failed request to an unreachable peer (several a second, at ERROR and WARN);
    /// the controller logs losing and regaining a peer once each, and its own leadership
    /// changes. `KEEL_LOG=info,openraft=info` brings them back.
    pub const fn default_log_filter(self) -> &'static str {
        match self {
            Binary::Controller => "info,openraft=off",
            Binary::Broker => "info",
        }
    }
}

/// Which binaries read a setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsedBy {
    /// `keel-controller` only.
    Controller,
    /// `keel-broker` only.
    Broker,
    /// Both, with the same name, forms, default and rule.
    Both,
}

impl UsedBy {
    /// Whether `binary` reads the setting.
    pub const fn includes(self, binary: Binary) -> bool {
        matches!(
            (self, binary),
            (UsedBy::Both, _)
                | (UsedBy::Controller, Binary::Controller)
                | (UsedBy::Broker, Binary::Broker)
        )
    }
}

/// Unit of a [`Kind::Duration`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeUnit {
    /// Milliseconds (keys ending in `_ms`).
    Ms,
    /// Seconds (keys ending in `_seconds`).
    Seconds,
}

impl TimeUnit {
    /// One day in this unit: the largest duration a setting accepts.
    pub const fn per_day(self) -> u64 {
        match self {
            TimeUnit::Ms => 86_400_000,
            TimeUnit::Seconds => 86_400,
        }
    }

    /// `ms` or `seconds`.
    pub const fn name(self) -> &'static str {
        match self {
            TimeUnit::Ms => "ms",
            TimeUnit::Seconds => "seconds",
        }
    }
}

/// The Rust integer a [`Kind::Int`] flag or variable is parsed as (a value that is not such an
/// integer is clap's error, exit 2; one outside the declared range is [`ConfigError::Invalid`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntType {
    /// `u32`.
    U32,
    /// `u64`.
    U64,
    /// `i32` (negative values are values, not flags).
    I32,
    /// `i64` (negative values are values, not flags).
    I64,
}

impl IntType {
    /// The type's largest value.
    pub const fn max(self) -> i128 {
        match self {
            IntType::U32 => u32::MAX as i128,
            IntType::U64 => u64::MAX as i128,
            IntType::I32 => i32::MAX as i128,
            IntType::I64 => i64::MAX as i128,
        }
    }
}

/// The type of a setting and its validation rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A duration (`u64`) in 1..=one day of its unit.
    Duration(TimeUnit),
    /// An integer in `min..=max`; `unit` names what it counts (`bytes`, `entries`, `ms`, ...)
    /// or is empty.
    Int {
        /// How flags and variables parse it.
        ty: IntType,
        /// Smallest value accepted.
        min: i128,
        /// Largest value accepted.
        max: i128,
        /// What it counts.
        unit: &'static str,
    },
    /// `true` or `false`.
    Bool,
    /// A socket address `ip:port` to bind.
    Address,
    /// An address `host:port` others connect to.
    HostPort,
    /// Listeners to bind: `NAME://ip:port,...` or one bare `ip:port` (the gRPC listener)
    /// ([`listeners::parse_listeners`]).
    Listeners,
    /// Listeners others connect to: `NAME://host:port,...` or one bare `host:port`.
    AdvertisedListeners,
    /// The static voter set `1@host:port,2@host:port,...`.
    Voters,
    /// A list of addresses others connect to: `host:port,host:port,...`
    /// ([`parse_host_port_list`]).
    HostPortList,
    /// A string (a path, a rack name).
    Text,
    /// One of these words.
    Choice(&'static [&'static str]),
}

/// The value a setting has when no layer sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultValue {
    /// No default: a start without it fails with [`ConfigError::Missing`].
    Required,
    /// This integer.
    Int(i128),
    /// This boolean.
    Bool(bool),
    /// This string.
    Text(&'static str),
    /// No value; the text says what that means (`off`, `never`).
    Unset(&'static str),
    /// Computed by each binary from other keys, differently; the texts say how.
    Derived {
        /// How `keel-controller` computes it.
        controller: &'static str,
        /// How `keel-broker` computes it.
        broker: &'static str,
    },
}

/// One configuration key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// The key in the file, snake_case (`log_segment_bytes`); the flag is `--log-segment-bytes`
    /// and the variable `KEEL_LOG_SEGMENT_BYTES`.
    pub name: &'static str,
    /// Kafka's name of the same setting (`log.segment.bytes`), or `""` when Kafka has none.
    pub kafka: &'static str,
    /// Type and validation rule.
    pub kind: Kind,
    /// Value when unset.
    pub default: DefaultValue,
    /// What it does (one sentence, Markdown; the README's "meaning" and the `--help` text).
    pub doc: &'static str,
    /// Which binaries read it.
    pub used_by: UsedBy,
}

impl Setting {
    /// The environment variable: `KEEL_` + the upper-case name.
    pub fn env(&self) -> String {
        format!("{ENV_PREFIX}{}", self.name.to_ascii_uppercase())
    }

    /// The flag without its dashes: the name with `-` for `_`.
    pub fn flag(&self) -> String {
        self.name.replace('_', "-")
    }

    /// Checks an explicitly set value against the kind's rule.
    fn check(&self, value: &Value) -> Result<(), String> {
        match (self.kind, value) {
            (Kind::Duration(unit), Value::Int(v)) => {
                if *v <= 0 {
                    Err("must be greater than 0".into())
                } else if *v > i128::from(unit.per_day()) {
                    Err(format!("{v} is more than a day ({})", unit.per_day()))
                } else {
                    Ok(())
                }
            }
            (Kind::Int { ty, min, max, .. }, Value::Int(v)) => {
                if (min..=max).contains(v) {
                    Ok(())
                } else if max == ty.max() {
                    Err(format!("{v} is less than {min}"))
                } else {
                    Err(format!("{v} is not in {min}..={max}"))
                }
            }
            (Kind::Bool, Value::Bool(_)) => Ok(()),
            (Kind::Address, Value::Text(s)) => s
                .parse::<SocketAddr>()
                .map(|_| ())
                .map_err(|e| format!("{s:?} is not an ip:port address ({e})")),
            (Kind::HostPort, Value::Text(s)) => parse_host_port(s).map(|_| ()),
            (Kind::HostPortList, Value::Text(s)) => parse_host_port_list(s).map(|_| ()),
            (Kind::Listeners, Value::Text(s)) => listeners::parse_listeners(s, true).map(|_| ()),
            (Kind::AdvertisedListeners, Value::Text(s)) => {
                listeners::parse_listeners(s, false).map(|_| ())
            }
            (Kind::Voters, Value::Text(s)) => keel_proto::voters::parse_voters(s).map(|_| ()),
            (Kind::Text, Value::Text(_)) => Ok(()),
            (Kind::Choice(words), Value::Text(s)) => {
                if words.contains(&s.as_str()) {
                    Ok(())
                } else {
                    let words: Vec<String> = words.iter().map(|w| format!("{w:?}")).collect();
                    Err(format!("{s:?} is not one of {}", words.join(", ")))
                }
            }
            (_, v) => Err(format!("{v} is not {}", self.kind.expected())),
        }
    }

    /// The default as a value, when there is one.
    fn default_value(&self) -> Option<Value> {
        match self.default {
            DefaultValue::Int(v) => Some(Value::Int(v)),
            DefaultValue::Bool(b) => Some(Value::Bool(b)),
            DefaultValue::Text(s) => Some(Value::Text(s.to_string())),
            DefaultValue::Required | DefaultValue::Unset(_) | DefaultValue::Derived { .. } => None,
        }
    }
}

impl Kind {
    /// What a value of this kind looks like (serde's "expected ..." and error texts).
    fn expected(self) -> &'static str {
        match self {
            Kind::Duration(_) | Kind::Int { .. } => "an integer",
            Kind::Bool => "a boolean",
            Kind::Address => "an ip:port string",
            Kind::HostPort => "a host:port string",
            Kind::HostPortList => "a host:port list string (host:port,host:port,...)",
            Kind::Listeners => "a listener string (ip:port or NAME://ip:port,...)",
            Kind::AdvertisedListeners => "a listener string (host:port or NAME://host:port,...)",
            Kind::Voters => "a voters string (1@host:port,...)",
            Kind::Text | Kind::Choice(_) => "a string",
        }
    }
}

/// `host:port` with a non-empty host and a port in 1..=65535; the host without brackets.
pub fn parse_host_port(s: &str) -> Result<(String, u16), String> {
    let (host, port) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("{s:?} has no :port"))?;
    if host.is_empty() {
        return Err(format!("{s:?} is not host:port (no host)"));
    }
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("{s:?}: the port must be 1-65535"))?;
    Ok((host.trim_matches(['[', ']']).to_string(), port))
}

/// Most addresses a [`Kind::HostPortList`] holds (a controller quorum has a handful).
pub const MAX_HOST_PORT_LIST: usize = 64;

/// Parses `host:port,host:port,...` (blanks around commas ignored) into its addresses, in
/// order, without duplicates.
///
/// Errors: an empty list, an entry that is not `host:port` ([`parse_host_port`]), a
/// duplicate, or more than [`MAX_HOST_PORT_LIST`] entries; the message names the entry.
pub fn parse_host_port_list(s: &str) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::new();
    for entry in s.split(',').map(str::trim) {
        if entry.is_empty() {
            return Err(format!(
                "{s:?} has an empty entry (host:port,host:port,...)"
            ));
        }
        if entry.contains('/') {
            return Err(format!(
                "{entry:?} is not host:port (give the address without a scheme or path)"
            ));
        }
        parse_host_port(entry)?;
        if out.iter().any(|e| e == entry) {
            return Err(format!("{entry:?} is listed twice"));
        }
        if out.len() == MAX_HOST_PORT_LIST {
            return Err(format!("more than {MAX_HOST_PORT_LIST} addresses"));
        }
        out.push(entry.to_string());
    }
    Ok(out)
}

/// The settings `binary` reads, in declaration order.
pub fn settings_of(binary: Binary) -> impl Iterator<Item = &'static Setting> {
    SETTINGS.iter().filter(move |s| s.used_by.includes(binary))
}

/// The environment variables `binary` reads ([`Schema::env_names`]).
pub fn env_names(binary: Binary) -> BTreeSet<String> {
    Schema::of(binary).env_names()
}

/// The README table of `binary`'s settings ([`Schema::markdown_table`]).
pub fn markdown_table(binary: Binary) -> String {
    Schema::of(binary).markdown_table()
}

/// A setting's value, as the file, a variable or a flag gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A number (durations and integers of every width).
    Int(i128),
    /// A boolean.
    Bool(bool),
    /// A string (addresses, paths, words).
    Text(String),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Int(v) => write!(f, "{v}"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Text(s) => write!(f, "{s:?}"),
        }
    }
}

/// The values one source (file, or environment and flags) sets, by key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layer(pub BTreeMap<&'static str, Value>);

impl Layer {
    /// Sets every key `over` sets.
    pub fn overlay(&mut self, over: Layer) {
        self.0.extend(over.0);
    }
}

/// The settings of one program: what its command line, file and validation know.
#[derive(Debug, Clone)]
pub struct Schema {
    binary: Option<Binary>,
    program: &'static str,
    about: &'static str,
    settings: Vec<&'static Setting>,
    /// The names, for serde's "expected one of" list (leaked once per schema: serde wants
    /// `&'static`; a process builds one or two).
    names: &'static [&'static str],
}

impl Schema {
    /// The schema of `binary`: the settings of [`SETTINGS`] it reads.
    pub fn of(binary: Binary) -> Self {
        Schema {
            binary: Some(binary),
            ..Self::new(binary.program(), binary.about(), settings_of(binary))
        }
    }

    /// A schema of `settings` for a program named `program` (tests declare their own).
    pub fn new(
        program: &'static str,
        about: &'static str,
        settings: impl IntoIterator<Item = &'static Setting>,
    ) -> Self {
        let settings: Vec<&'static Setting> = settings.into_iter().collect();
        let names = settings.iter().map(|s| s.name).collect::<Vec<_>>();
        Schema {
            binary: None,
            program,
            about,
            settings,
            names: Box::leak(names.into_boxed_slice()),
        }
    }

    /// The environment variables the program reads: [`CONFIG_ENV`] and each setting's.
    /// (`KEEL_LOG`, the log filter, is not a setting.)
    pub fn env_names(&self) -> BTreeSet<String> {
        std::iter::once(CONFIG_ENV.to_string())
            .chain(self.settings.iter().map(|s| s.env()))
            .collect()
    }

    /// The program name.
    pub fn program(&self) -> &'static str {
        self.program
    }

    /// The settings, in declaration order.
    pub fn settings(&self) -> &[&'static Setting] {
        &self.settings
    }

    fn setting(&self, name: &str) -> Option<&'static Setting> {
        self.settings.iter().copied().find(|s| s.name == name)
    }

    /// The clap command: `--config FILE` (`KEEL_CONFIG`) and, per setting, its flag and
    /// variable. Flags and variables parse as the setting's type (a non-number is clap's
    /// error); ranges are checked later, by [`Schema::resolve`], as for the file.
    pub fn command(&self) -> Command {
        let config = Arg::new("config")
            .long("config")
            .value_name("FILE")
            .env(CONFIG_ENV)
            .value_parser(value_parser!(PathBuf))
            .help("TOML configuration file (keys: see the README's configuration table).");
        let args = self.settings.iter().map(|s| {
            let mut help = s.doc.to_string();
            let unit = match s.kind {
                Kind::Duration(u) => u.name(),
                Kind::Int { unit, .. } => unit,
                _ => "",
            };
            if !unit.is_empty() {
                help.push_str(&format!(", {unit}"));
            }
            if !s.kafka.is_empty() {
                help.push_str(&format!(" (Kafka: {})", s.kafka));
            }
            let arg = Arg::new(s.name)
                .long(s.flag())
                .value_name(s.name.to_ascii_uppercase())
                .env(s.env())
                .action(ArgAction::Set)
                .help(help);
            match s.kind {
                Kind::Duration(_) => arg.value_parser(value_parser!(u64)),
                Kind::Int { ty, .. } => match ty {
                    IntType::U32 => arg.value_parser(value_parser!(u32)),
                    IntType::U64 => arg.value_parser(value_parser!(u64)),
                    IntType::I32 => arg
                        .value_parser(value_parser!(i32))
                        .allow_negative_numbers(true),
                    IntType::I64 => arg
                        .value_parser(value_parser!(i64))
                        .allow_negative_numbers(true),
                },
                Kind::Bool => arg.value_parser(value_parser!(bool)),
                _ => arg.value_parser(value_parser!(String)),
            }
        });
        Command::new(self.program)
            .version(env!("CARGO_PKG_VERSION"))
            .about(self.about)
            .arg(config)
            .args(args)
    }

    /// The values set by flags and environment variables in `matches` (of [`Self::command`]).
    pub fn layer_from_matches(&self, matches: &ArgMatches) -> Layer {
        let mut layer = Layer::default();
        for s in &self.settings {
            if !matches!(
                matches.value_source(s.name),
                Some(ValueSource::CommandLine | ValueSource::EnvVariable)
            ) {
                continue;
            }
            let value = match s.kind {
                Kind::Duration(_) => matches
                    .get_one::<u64>(s.name)
                    .map(|v| Value::Int((*v).into())),
                Kind::Int { ty, .. } => match ty {
                    IntType::U32 => matches
                        .get_one::<u32>(s.name)
                        .map(|v| Value::Int((*v).into())),
                    IntType::U64 => matches
                        .get_one::<u64>(s.name)
                        .map(|v| Value::Int((*v).into())),
                    IntType::I32 => matches
                        .get_one::<i32>(s.name)
                        .map(|v| Value::Int((*v).into())),
                    IntType::I64 => matches
                        .get_one::<i64>(s.name)
                        .map(|v| Value::Int((*v).into())),
                },
                Kind::Bool => matches.get_one::<bool>(s.name).map(|b| Value::Bool(*b)),
                _ => matches
                    .get_one::<String>(s.name)
                    .map(|t| Value::Text(t.clone())),
            };
            if let Some(v) = value {
                layer.0.insert(s.name, v);
            }
        }
        layer
    }

    /// The config file named by `--config`/`KEEL_CONFIG` in `matches`, if any.
    pub fn config_file(matches: &ArgMatches) -> Option<&Path> {
        matches.get_one::<PathBuf>("config").map(PathBuf::as_path)
    }

    /// Parses config text. Errors are one line ([`crate::config_file::parse_toml`]): an
    /// unknown key (a Kafka-style dotted one gets the key to write), a value of the wrong type.
    pub fn parse_toml(&self, text: &str) -> Result<Layer, String> {
        parse_toml_seed(text, file::FileSeed(self))
    }

    /// Reads and parses a config file ([`Self::parse_toml`]); errors name the file.
    pub fn read_file(&self, path: &Path) -> Result<Layer, ConfigFileError> {
        crate::config_file::read_with(path, |text| self.parse_toml(text))
    }

    /// Loads from a parsed command line: the file it names (if any), overlaid by its flags and
    /// variables, validated.
    pub fn load(&self, matches: &ArgMatches) -> Result<Settings, ConfigError> {
        let mut layer = match Self::config_file(matches) {
            Some(path) => self.read_file(path)?,
            None => Layer::default(),
        };
        layer.overlay(self.layer_from_matches(matches));
        self.resolve(layer)
    }

    /// Validates the merged `layer`: every value within its kind's rule, required keys
    /// present (the first error in declaration order, bad values before missing keys).
    /// Defaults fill the rest.
    pub fn resolve(&self, mut layer: Layer) -> Result<Settings, ConfigError> {
        if let Some(key) = layer.0.keys().find(|k| self.setting(k).is_none()) {
            return Err(ConfigError::Invalid {
                key,
                reason: format!("not a setting of {}", self.program),
            });
        }
        // Bad values first (the more specific error), then missing ones.
        for s in &self.settings {
            if let Some(v) = layer.0.get(s.name) {
                s.check(v).map_err(|reason| ConfigError::Invalid {
                    key: s.name,
                    reason,
                })?;
            }
        }
        let mut values = BTreeMap::new();
        for s in &self.settings {
            match layer.0.remove(s.name).or_else(|| s.default_value()) {
                Some(v) => {
                    values.insert(s.name, v);
                }
                None if s.default == DefaultValue::Required => {
                    return Err(ConfigError::Missing { key: s.name });
                }
                None => {}
            }
        }
        Ok(Settings {
            program: self.program,
            declared: self.settings.iter().map(|s| s.name).collect(),
            values,
            read: Default::default(),
        })
    }
}

/// Validated settings of one program, read by the binary's typed config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    program: &'static str,
    declared: BTreeSet<&'static str>,
    values: BTreeMap<&'static str, Value>,
    /// Keys [`Self::get`] was asked for: a binary's typed config must read every key it
    /// declares ([`Self::unread`]), so a declared key cannot be silently ignored.
    read: std::cell::RefCell<BTreeSet<&'static str>>,
}

impl Settings {
    /// The value of `key` (set, or its default); `None` when unset without a default.
    ///
    /// Panics when the program does not declare `key` or its value does not convert to `T`:
    /// both are mistakes in the code, not in the configuration.
    pub fn get<T: FromValue>(&self, key: &str) -> Option<T> {
        let Some(&name) = self.declared.get(key) else {
            panic!("{} declares no setting {key}", self.program);
        };
        self.read.borrow_mut().insert(name);
        self.values.get(key).map(|v| {
            T::from_value(v).unwrap_or_else(|| {
                panic!(
                    "setting {key}: {v} does not convert to {}",
                    std::any::type_name::<T>()
                )
            })
        })
    }

    /// The value of `key` as it was set or defaulted; `None` when unset without a default.
    pub fn value(&self, key: &str) -> Option<&Value> {
        self.values.get(key)
    }

    /// The value of a required key, or of one with a default. Panics as [`Self::get`] does,
    /// and when there is no value (a key without default that is not required).
    pub fn require<T: FromValue>(&self, key: &str) -> T {
        self.get(key)
            .unwrap_or_else(|| panic!("setting {key} is neither required nor defaulted"))
    }

    /// The declared keys nobody has read yet through [`Self::get`] or [`Self::require`].
    /// Each binary's config tests assert this is empty after building the typed config: a
    /// key declared for a binary is a key that binary uses.
    pub fn unread(&self) -> Vec<&'static str> {
        let read = self.read.borrow();
        self.declared
            .iter()
            .filter(|k| !read.contains(*k))
            .copied()
            .collect()
    }
}

/// A Rust type a setting's [`Value`] converts to (after validation).
pub trait FromValue: Sized {
    /// The converted value; `None` when the value has another shape.
    fn from_value(v: &Value) -> Option<Self>;
}

macro_rules! from_int {
    ($($t:ty),*) => {$(
        impl FromValue for $t {
            fn from_value(v: &Value) -> Option<Self> {
                match v {
                    Value::Int(i) => <$t>::try_from(*i).ok(),
                    _ => None,
                }
            }
        }
    )*};
}
from_int!(u32, u64, i32, i64);

impl FromValue for bool {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }
}

impl FromValue for String {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Text(s) => Some(s.clone()),
            _ => None,
        }
    }
}

impl FromValue for PathBuf {
    fn from_value(v: &Value) -> Option<Self> {
        String::from_value(v).map(PathBuf::from)
    }
}

impl FromValue for SocketAddr {
    fn from_value(v: &Value) -> Option<Self> {
        String::from_value(v)?.parse().ok()
    }
}

impl FromValue for LogFormat {
    fn from_value(v: &Value) -> Option<Self> {
        String::from_value(v)?.parse().ok()
    }
}

/// How a node reaches the controller quorum: exactly one of `controller_quorum_voters` and
/// `controller_quorum_bootstrap_servers` (KIP-853).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuorumContact {
    /// Static voters, id -> `host:port` (`controller_quorum_voters`).
    Voters(BTreeMap<u64, String>),
    /// Controllers to ask for the voters, `host:port` (`controller_quorum_bootstrap_servers`).
    Bootstrap(Vec<String>),
}

impl QuorumContact {
    /// Reads the two keys.
    ///
    /// Errors: neither is set ([`ConfigError::Missing`] naming both), or both are
    /// ([`ConfigError::Invalid`]).
    pub fn from_settings(s: &Settings) -> Result<Self, ConfigError> {
        let voters: Option<BTreeMap<u64, String>> = s.get("controller_quorum_voters");
        let bootstrap: Option<Vec<String>> = s.get("controller_quorum_bootstrap_servers");
        match (voters, bootstrap) {
            (Some(v), None) => Ok(Self::Voters(v)),
            (None, Some(b)) => Ok(Self::Bootstrap(b)),
            (None, None) => Err(ConfigError::Missing {
                key: "controller_quorum_voters (or controller_quorum_bootstrap_servers)",
            }),
            (Some(_), Some(_)) => Err(ConfigError::Invalid {
                key: "controller_quorum_bootstrap_servers",
                reason: "set either controller_quorum_voters (static voters) or \
                         controller_quorum_bootstrap_servers (a dynamic quorum, KIP-853), not both"
                    .into(),
            }),
        }
    }

    /// The static voters; empty for [`Self::Bootstrap`].
    pub fn voters(&self) -> BTreeMap<u64, String> {
        match self {
            Self::Voters(v) => v.clone(),
            Self::Bootstrap(_) => BTreeMap::new(),
        }
    }
}

/// The addresses of a [`Kind::HostPortList`] setting.
impl FromValue for Vec<String> {
    fn from_value(v: &Value) -> Option<Self> {
        parse_host_port_list(&String::from_value(v)?).ok()
    }
}

/// The voter set of a [`Kind::Voters`] setting, by node id.
impl FromValue for BTreeMap<u64, String> {
    fn from_value(v: &Value) -> Option<Self> {
        keel_proto::voters::parse_voters(&String::from_value(v)?).ok()
    }
}

mod file;
mod readme;

#[cfg(test)]
mod tests;
