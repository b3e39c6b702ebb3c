//! The limits on the command line's numeric options, and the checks that refuse values outside
//! them.
//!
//! Every thread count, duration and repeat count a user types goes through these checks before
//! anything runs, so an absurd value (e.g. `--threads 100000`, which would exhaust thread stacks
//! and abort the process) is refused with [`BenchError::InvalidArgument`] naming the option and
//! its range, and the binary exits with status 2 instead of panicking or aborting. The maxima are
//! deliberately generous for this project's machines and are stated in `--help`.
//!
//! Not for: workload-specific checks (`--intervals`, `--writers` against `--threads`), which
//! live with the workloads.

use crate::error::BenchError;
use std::fmt;
use std::num::{IntErrorKind, ParseIntError};
use std::str::FromStr;

/// Most threads one measured point may use (`--threads`).
pub const MAX_THREADS: usize = 1024;

/// Longest measured time per repeat, in milliseconds (`--duration-ms`): 60 s.
pub const MAX_DURATION_MS: u64 = 60_000;

/// Most repeats per point (`--repeat`).
pub const MAX_REPEAT: usize = 1000;

/// `metis`: default words of the text (`--metis-words`); one job takes ~25 ms at one thread on
/// the development machine.
pub const METIS_DEFAULT_WORDS: usize = 1 << 20;

/// `metis`: most words of the text (`--metis-words`).
pub const METIS_MAX_WORDS: usize = 1 << 24;

/// Why a number on the command line did not parse: the text is not an unsigned decimal
/// integer (a negative number, a fraction, a word) or does not fit the option's type. Displayed
/// after the option's name: `--duration-ms must be a positive integer, got -5`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NumberError {
    /// The text as typed.
    got: String,
    /// Whether 0 is a possible value of the option (`non_negative`) or not (`positive`).
    zero_ok: bool,
    /// The text is digits, but too many for the option's type.
    too_large: bool,
}

impl fmt::Display for NumberError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.zero_ok {
            "a non-negative integer"
        } else {
            "a positive integer"
        };
        if self.too_large {
            write!(f, "must be {what}, got {} (too large)", self.got)
        } else if self.got.is_empty() {
            write!(f, "must be {what}, got nothing")
        } else {
            write!(f, "must be {what}, got {}", self.got)
        }
    }
}

impl std::error::Error for NumberError {}

fn number<T: FromStr<Err = ParseIntError>>(s: &str, zero_ok: bool) -> Result<T, NumberError> {
    s.parse().map_err(|e: ParseIntError| NumberError {
        got: s.to_owned(),
        zero_ok,
        too_large: *e.kind() == IntErrorKind::PosOverflow,
    })
}

/// The command line's parser for a count whose smallest value is 1 (`--threads`,
/// `--duration-ms`, `--repeat`, ...): an unsigned decimal integer. Zero parses (the option's
/// range check refuses it, naming the range); a negative or malformed number is a
/// [`NumberError`]. The options that use it accept a leading `-` as a value, so that `-5` gets
/// this one line instead of clap's "unexpected argument".
pub fn positive<T: FromStr<Err = ParseIntError>>(s: &str) -> Result<T, NumberError> {
    number(s, false)
}

/// Like [`positive`], for options where 0 is meaningful (`--writers`, `--update-pct`,
/// `--mmap-pct`, `--warmup`).
pub fn non_negative<T: FromStr<Err = ParseIntError>>(s: &str) -> Result<T, NumberError> {
    number(s, true)
}

/// Refuses an empty list of thread counts, or one with a count outside `1..=MAX_THREADS`.
pub fn check_threads(threads: &[usize]) -> Result<(), BenchError> {
    if threads.is_empty() {
        return Err(BenchError::InvalidArgument(
            "--threads needs at least one thread count".into(),
        ));
    }
    match threads.iter().find(|&&t| t == 0 || t > MAX_THREADS) {
        Some(t) => Err(BenchError::InvalidArgument(format!(
            "--threads must be in 1..={MAX_THREADS}, got {t}"
        ))),
        None => Ok(()),
    }
}

/// Refuses a duration outside `1..=MAX_DURATION_MS` milliseconds.
pub fn check_duration_ms(ms: u64) -> Result<(), BenchError> {
    if ms == 0 || ms > MAX_DURATION_MS {
        return Err(BenchError::InvalidArgument(format!(
            "--duration-ms must be in 1..={MAX_DURATION_MS}, got {ms}"
        )));
    }
    Ok(())
}

/// Refuses a repeat count outside `1..=MAX_REPEAT`.
pub fn check_repeat(repeat: usize) -> Result<(), BenchError> {
    if repeat == 0 || repeat > MAX_REPEAT {
        return Err(BenchError::InvalidArgument(format!(
            "--repeat must be in 1..={MAX_REPEAT}, got {repeat}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_must_be_a_non_empty_list_within_the_limit() {
        assert!(check_threads(&[1, MAX_THREADS]).is_ok());
        for bad in [&[][..], &[0], &[1, MAX_THREADS + 1], &[100_000]] {
            let e = check_threads(bad).unwrap_err();
            assert!(matches!(e, BenchError::InvalidArgument(_)), "{bad:?}");
            assert!(e.to_string().contains("--threads"), "{e}");
        }
    }

    #[test]
    fn numbers_parse_as_unsigned_decimals_and_say_what_they_got_otherwise() {
        assert_eq!(positive::<u64>("500"), Ok(500));
        assert_eq!(non_negative::<u32>("0"), Ok(0));
        let msg = |r: Result<u64, NumberError>| r.unwrap_err().to_string();
        assert_eq!(msg(positive("-5")), "must be a positive integer, got -5");
        assert_eq!(
            msg(non_negative("-1")),
            "must be a non-negative integer, got -1"
        );
        assert_eq!(msg(positive("1.5")), "must be a positive integer, got 1.5");
        assert_eq!(msg(positive("ten")), "must be a positive integer, got ten");
        assert_eq!(msg(positive("")), "must be a positive integer, got nothing");
        assert_eq!(
            msg(positive("18446744073709551616")),
            "must be a positive integer, got 18446744073709551616 (too large)"
        );
    }

    #[test]
    fn duration_and_repeat_are_bounded_on_both_sides() {
        assert!(check_duration_ms(1).is_ok() && check_duration_ms(MAX_DURATION_MS).is_ok());
        assert!(check_duration_ms(0).is_err() && check_duration_ms(MAX_DURATION_MS + 1).is_err());
        assert!(check_repeat(1).is_ok() && check_repeat(MAX_REPEAT).is_ok());
        assert!(check_repeat(0).is_err() && check_repeat(MAX_REPEAT + 1).is_err());
    }
}
