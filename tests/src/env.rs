//! Benches' and scenarios' settings from environment variables, checked.
//!
//! A value that does not parse, or is out of its range, ends the process with exit code 2
//! and a message naming the variable, the value and what was expected: a typo in
//! `KEEL_BENCH_PARTITIONS` must not start a full 100,000-partition run with the default.
//! An unset variable, or one set to the empty string, takes the default.

use std::fmt::Display;
use std::ops::RangeInclusive;
use std::str::FromStr;

/// The value of `name` parsed as a `T` within `range`, `None` when unset or empty.
///
/// Exits the process (code 2) naming `name` when it is set to something else.
pub fn parsed<T>(name: &str, range: RangeInclusive<T>) -> Option<T>
where
    T: FromStr + PartialOrd + Display,
{
    let raw = std::env::var(name).ok()?;
    if raw.trim().is_empty() {
        return None;
    }
    Some(parse_or_exit(name, &raw, &raw, &range))
}

/// The value of `name` parsed as a `T` within `range`, `default` when unset or empty.
///
/// Exits the process (code 2) naming `name` when it is set to something else.
pub fn parsed_or<T>(name: &str, range: RangeInclusive<T>, default: T) -> T
where
    T: FromStr + PartialOrd + Display,
{
    parsed(name, range).unwrap_or(default)
}

/// The comma-separated values of `name`, each a `T` within `range`, `None` when unset or
/// empty.
///
/// Exits the process (code 2) naming `name` when any item is something else.
pub fn parsed_list<T>(name: &str, range: RangeInclusive<T>) -> Option<Vec<T>>
where
    T: FromStr + PartialOrd + Display,
{
    let raw = std::env::var(name).ok()?;
    if raw.trim().is_empty() {
        return None;
    }
    Some(
        raw.split(',')
            .map(|item| parse_or_exit(name, &raw, item, &range))
            .collect(),
    )
}

/// `item` (all of `raw`, or one item of a list) parsed, or the process ends naming `name`.
fn parse_or_exit<T>(name: &str, raw: &str, item: &str, range: &RangeInclusive<T>) -> T
where
    T: FromStr + PartialOrd + Display,
{
    match check(item, range) {
        Ok(v) => v,
        Err(expected) if item == raw => {
            eprintln!("error: {name}={raw:?}: expected {expected}");
            std::process::exit(2);
        }
        Err(expected) => {
            eprintln!("error: {name}={raw:?}: {item:?} is not {expected}");
            std::process::exit(2);
        }
    }
}

/// `raw` parsed and within `range`, or what was expected instead.
fn check<T>(raw: &str, range: &RangeInclusive<T>) -> Result<T, String>
where
    T: FromStr + PartialOrd + Display,
{
    let expected = || format!("a number from {} to {}", range.start(), range.end());
    match raw.trim().parse::<T>() {
        Ok(v) if range.contains(&v) => Ok(v),
        _ => Err(expected()),
    }
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn values_outside_the_range_or_not_numbers_are_refused() {
        assert_eq!(check::<u64>("42", &(1..=100)), Ok(42));
        assert_eq!(check::<u64>(" 7 ", &(1..=100)), Ok(7));
        assert!(check::<u64>("abc", &(1..=100)).is_err());
        assert!(check::<u64>("0", &(1..=100)).is_err());
        assert!(check::<u64>("101", &(1..=100)).is_err());
        assert!(check::<u64>("-1", &(1..=100)).is_err());
        assert!(check::<f64>("nan", &(0.001..=10_000.0)).is_err());
        assert_eq!(
            check::<u64>("x", &(1..=100)).unwrap_err(),
            "a number from 1 to 100"
        );
    }
}
