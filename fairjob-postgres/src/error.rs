//! Errors of the PostgreSQL side.

/// A `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A PostgreSQL error.
    #[error("postgres: {0}")]
    Postgres(#[from] sqlx::Error),
    /// fairjob (building a payload, or Redis).
    #[error(transparent)]
    Fairjob(#[from] fairjob::Error),
    /// A pump step took longer than half the lease and was abandoned (it is
    /// retried; nothing is lost).
    #[error("a pump step took longer than {0:?} and was abandoned")]
    Stalled(std::time::Duration),
    /// The database's fairjob schema is older than this crate's.
    #[error(
        "the fairjob schema in PostgreSQL is at version {found}, this crate needs {wanted}: run `fairjob-worker postgres migrate --postgres URL` (or call fairjob_postgres::migrate(&pool)) first"
    )]
    SchemaOutdated {
        /// The version found (0 = none).
        found: i32,
        /// The version this crate needs.
        wanted: i32,
    },
    /// An enqueue found the fairjob schema missing or older than this
    /// crate's (a table or column it writes does not exist); the caller's
    /// transaction failed with it, so nothing was half-enqueued.
    #[error(
        "cannot enqueue: the fairjob schema in PostgreSQL is missing or older than this crate's (version {wanted}): {detail}; run `fairjob-worker postgres migrate --postgres URL` (or call fairjob_postgres::migrate(&pool)) first"
    )]
    SchemaNotReady {
        /// PostgreSQL's message.
        detail: String,
        /// The version this crate needs.
        wanted: i32,
    },
    /// The database's fairjob schema is newer than this crate's.
    #[error(
        "the fairjob schema in PostgreSQL is at version {found}, newer than this crate's {wanted}: upgrade fairjob-postgres"
    )]
    SchemaNewer {
        /// The version found.
        found: i32,
        /// The newest version this crate knows.
        wanted: i32,
    },
}
