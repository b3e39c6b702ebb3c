//! Why a benchmark run was refused or failed.
//!
//! Every error the `aspace` binary can report is one variant of [`BenchError`]: bad command-line
//! input (an unknown workload or design, a zero thread count), a results directory that
//! `aspace report` cannot read, a workload's result that failed its check against a reference,
//! and failures while writing the results directory (I/O, JSON, plotting). The binary prints the
//! message and exits non-zero;
//! nothing here is used on a measured path.

use std::path::PathBuf;

/// A refused request or a failed output step.
#[derive(thiserror::Error, Debug)]
pub enum BenchError {
    /// The workload name is not registered (`aspace list` shows the names).
    #[error("unknown workload `{name}`; known workloads: {known}")]
    UnknownWorkload {
        /// What was asked for.
        name: String,
        /// Comma-separated list of registered workloads.
        known: String,
    },
    /// The workload has no design of that name.
    #[error("workload `{workload}` has no design `{design}`; its designs: {known}")]
    UnknownDesign {
        /// The workload asked for.
        workload: String,
        /// The design asked for.
        design: String,
        /// Comma-separated list of the workload's designs.
        known: String,
    },
    /// A numeric option is out of range (zero or too many threads, a zero or too long duration,
    /// an update share above 100 %; see [`crate::limits`]).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A workload could not build what it measures (its memory, files, descriptors).
    #[error("setup failed: {0}")]
    Setup(String),
    /// `aspace conflicts` in a binary built without the instrumentation.
    #[error(
        "aspace conflicts needs the instrumented build: \
         cargo run --release --features conflicts -- conflicts {0}"
    )]
    NotInstrumented(String),
    /// A workload checked what it computed against a reference and found it wrong (a bug of
    /// the design under test or of the workload; the measurement is discarded).
    #[error("{workload} on {design}: wrong result: {message}")]
    WrongResult {
        /// The workload.
        workload: String,
        /// The design it ran on.
        design: String,
        /// What differed.
        message: String,
    },
    /// Writing the results directory failed.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file or directory being written.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Serialising measurements failed.
    #[error("cannot serialise measurements: {0}")]
    Json(#[from] serde_json::Error),
    /// A results directory (for `aspace report`) is missing, or one of its files cannot be
    /// read or parsed.
    #[error("not a usable results directory: {path}: {reason}")]
    InvalidResults {
        /// The directory or file concerned.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Drawing an SVG plot failed.
    #[error("cannot draw plot {path}: {message}")]
    Plot {
        /// The SVG file being drawn.
        path: PathBuf,
        /// The plotting library's message.
        message: String,
    },
}

impl BenchError {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        BenchError::Io {
            path: path.into(),
            source,
        }
    }

    /// A results file at `path` that cannot be used, and why.
    pub fn invalid_results(path: impl Into<PathBuf>, reason: impl std::fmt::Display) -> Self {
        BenchError::InvalidResults {
            path: path.into(),
            reason: reason.to_string(),
        }
    }
}
