//! The exclusive lock an executor holds on its data dir while it runs.
//!
//! Two processes on one data dir would share one executor id and fence each other at
//! every registration, so the second one is refused at start. The lock is an advisory
//! `flock` on `<data-dir>/executor.lock` (released by the kernel when the process ends,
//! even after kill -9); the file names its holder (`pid N, executor ID`) so that the
//! refused process can say who holds it. The control plane relies on the same kind of
//! lock, redb's on its store file.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// File in the data dir that the running executor holds locked.
pub const LOCK_FILE: &str = "executor.lock";

/// Why the data dir could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum DirLockError {
    /// Another process holds the lock.
    #[error("data dir {} is in use by {holder}", dir.display())]
    Held {
        /// The data dir.
        dir: PathBuf,
        /// Who holds it, as its lock file says (`pid N, executor ID`).
        holder: String,
    },
    /// The lock file could not be opened, locked or written.
    #[error("data dir {}: cannot lock {LOCK_FILE}", dir.display())]
    Io {
        /// The data dir.
        dir: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// The held lock; dropping it releases the data dir.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

impl DirLock {
    /// Locks `dir` (which exists) for executor `executor_id` of this process.
    ///
    /// # Errors
    /// [`DirLockError::Held`] naming the holder when another process has it locked;
    /// [`DirLockError::Io`] when the lock file cannot be used.
    pub fn acquire(dir: &Path, executor_id: &str) -> Result<Self, DirLockError> {
        let io = |source| DirLockError::Io {
            dir: dir.to_path_buf(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(LOCK_FILE))
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(DirLockError::Held {
                    dir: dir.to_path_buf(),
                    holder: holder_text(&text),
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        file.set_len(0).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        file.write_all(holder_line(std::process::id(), executor_id).as_bytes())
            .map_err(io)?;
        file.sync_all().map_err(io)?;
        Ok(Self { _file: file })
    }
}

/// What the lock file of a holder says. Pure.
fn holder_line(pid: u32, executor_id: &str) -> String {
    format!("pid {pid}, executor {executor_id}\n")
}

/// The holder as a refused process names it: the lock file's line, or a placeholder
/// while the holder has not written it yet. Pure.
fn holder_text(file: &str) -> String {
    match file.trim() {
        "" => "another process (not yet recorded in its lock file)".into(),
        line => line.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holder_line_names_the_pid_and_the_executor() {
        assert_eq!(holder_line(42, "exec-1"), "pid 42, executor exec-1\n");
    }

    #[test]
    fn the_holder_is_the_lock_files_line() {
        assert_eq!(
            holder_text("pid 42, executor exec-1\n"),
            "pid 42, executor exec-1"
        );
    }

    #[test]
    fn an_empty_lock_file_names_an_unrecorded_holder() {
        assert_eq!(
            holder_text(" \n"),
            "another process (not yet recorded in its lock file)"
        );
    }

    #[test]
    fn a_second_lock_on_one_dir_is_refused_naming_the_holder_and_freed_on_drop() {
        let dir = tempfile::tempdir().expect("dir");
        let first = DirLock::acquire(dir.path(), "exec-1").expect("first");
        let e = DirLock::acquire(dir.path(), "exec-2").expect_err("second");
        let text = e.to_string();
        assert!(
            text.contains(&format!("pid {}, executor exec-1", std::process::id()))
                && text.contains(&dir.path().display().to_string()),
            "{text}"
        );
        drop(first);
        DirLock::acquire(dir.path(), "exec-2").expect("after release");
    }
}
