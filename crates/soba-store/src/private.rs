//! Session files are readable only by their owner: a log holds every
//! prompt, file and command output of a session (as the TUI's input
//! history does, which is 0600 too). Logs, flight records and recovery
//! files are created 0600, the folders SOBA makes for them 0700; a file
//! or folder that already exists keeps its mode.

use std::fs::OpenOptions;
use std::path::Path;

/// The mode of a file SOBA creates for a session.
#[cfg(unix)]
const FILE_MODE: u32 = 0o600;

/// The mode of a folder SOBA creates for sessions.
#[cfg(unix)]
const DIR_MODE: u32 = 0o700;

/// Makes `options` create the file readable and writable by its owner
/// only.
pub(crate) fn owner_only(options: &mut OpenOptions) -> &mut OpenOptions {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(FILE_MODE);
    }
    options
}

/// Creates `dir` and its missing parents, each new one owner-only.
pub(crate) fn create_dir_all(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(DIR_MODE);
    }
    builder.create(dir)
}
