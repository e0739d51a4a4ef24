//! Where things live (SPEC §14.1): the workspace root and its project slug,
//! the user config file, the sessions directory and the logs directory,
//! from `SOBA_HOME` or the XDG base directories.
//!
//! Everything is computed from an explicit [`Env`] so tests never read or
//! touch the real environment.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The environment variables SOBA reads, captured once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Env {
    vars: BTreeMap<String, String>,
    /// Variables whose name or value is not UTF-8 (names shown lossily):
    /// kept so that reading one is an error ([`Env::var`]), never a silent
    /// "unset".
    not_utf8: BTreeSet<String>,
}

/// A variable SOBA reads holds bytes that are not UTF-8.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("environment variable {name} is not valid UTF-8: set it to UTF-8 text (or unset it)")]
pub struct NotUtf8 {
    /// The variable's name (lossily decoded).
    pub name: String,
}

impl Env {
    /// Captures the process environment, with every variable that is not
    /// UTF-8 remembered as such.
    pub fn from_process() -> Self {
        Env::from_os_pairs(std::env::vars_os())
    }

    /// Builds an environment from raw pairs, as [`Env::from_process`]
    /// does: a pair whose name or value is not UTF-8 is recorded in
    /// `not_utf8`.
    pub fn from_os_pairs(pairs: impl IntoIterator<Item = (OsString, OsString)>) -> Self {
        let mut env = Env::default();
        for (name, value) in pairs {
            match (name.into_string(), value.into_string()) {
                (Ok(name), Ok(value)) => {
                    env.vars.insert(name, value);
                }
                (Ok(name), Err(_)) => {
                    env.not_utf8.insert(name);
                }
                (Err(name), _) => {
                    env.not_utf8.insert(name.to_string_lossy().into_owned());
                }
            }
        }
        env
    }

    /// Builds an environment from pairs (tests pass an explicit map).
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        Env {
            vars: pairs
                .into_iter()
                .map(|(name, value)| (name.into(), value.into()))
                .collect(),
            not_utf8: BTreeSet::new(),
        }
    }

    /// Returns a variable's value; an empty value counts as unset, and so
    /// does a value that is not UTF-8 (use [`Env::var`] where that must be
    /// an error).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars
            .get(name)
            .map(String::as_str)
            .filter(|value| !value.is_empty())
    }

    /// Returns a variable's value as [`Env::get`] does, but a value that
    /// is not UTF-8 is an error naming the variable — every variable that
    /// decides a setting, a location or a key is read this way.
    pub fn var(&self, name: &str) -> Result<Option<&str>, NotUtf8> {
        if self.not_utf8.contains(name) {
            return Err(NotUtf8 {
                name: name.to_owned(),
            });
        }
        Ok(self.get(name))
    }

    /// Returns every variable whose name starts with `prefix`, sorted; the
    /// first such variable that is not UTF-8 is an error.
    pub fn with_prefix<'a>(&'a self, prefix: &'a str) -> Result<Vec<(&'a str, &'a str)>, NotUtf8> {
        if let Some(name) = self.not_utf8.iter().find(|name| name.starts_with(prefix)) {
            return Err(NotUtf8 { name: name.clone() });
        }
        Ok(self
            .vars
            .iter()
            .filter(move |(name, _)| name.starts_with(prefix))
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect())
    }
}

/// Why a location cannot be determined.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PathsError {
    /// The workspace root does not exist or cannot be canonicalised.
    #[error("cannot use {path} as the workspace root")]
    Root {
        /// The directory given (`--cwd`, or the current directory).
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The workspace root is not a directory.
    #[error("the workspace root {path} is not a directory; pass a directory to --cwd")]
    RootNotDirectory {
        /// The canonical path.
        path: PathBuf,
    },
    /// Neither `SOBA_HOME` nor a home directory is known.
    #[error(
        "cannot find a home directory for soba's files: set SOBA_HOME (or HOME, or the XDG_*_HOME variables)"
    )]
    NoHome,
    /// `SOBA_HOME`, `HOME` or an `XDG_*_HOME` variable is not UTF-8.
    #[error(transparent)]
    NotUtf8(#[from] NotUtf8),
}

/// The workspace: the canonical root and its project slug.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    /// The canonicalised root.
    pub root: PathBuf,
    /// `<basename>-<first 8 hex of sha256(root)>`.
    pub slug: String,
}

impl Workspace {
    /// Canonicalises `dir` (the `--cwd` directory, or the current one).
    pub fn at(dir: &Path) -> Result<Self, PathsError> {
        let root = std::fs::canonicalize(dir).map_err(|source| PathsError::Root {
            path: dir.to_path_buf(),
            source,
        })?;
        if !root.is_dir() {
            return Err(PathsError::RootNotDirectory { path: root });
        }
        let slug = project_slug(&root);
        Ok(Workspace { root, slug })
    }

    /// Returns `<root>/.soba`, where the project files live.
    pub fn project_dir(&self) -> PathBuf {
        self.root.join(".soba")
    }

    /// Returns the project config file, `<root>/.soba/config.json`.
    pub fn project_config(&self) -> PathBuf {
        self.project_dir().join("config.json")
    }
}

/// Returns the project slug of a canonical root: its basename, `-`, and the
/// first 8 hex digits of the sha256 of the root's path (SPEC §14.1).
pub fn project_slug(root: &Path) -> String {
    let digest = Sha256::digest(root.as_os_str().as_encoded_bytes());
    let hex: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    let base = root
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "root".to_owned());
    format!("{base}-{hex}")
}

/// Returns the logs directory: `$SOBA_HOME/logs`, else
/// `$XDG_STATE_HOME/soba/logs` (SPEC §14.1).
pub fn logs_dir(env: &Env) -> Result<PathBuf, PathsError> {
    match env.var("SOBA_HOME")? {
        Some(home) => Ok(PathBuf::from(home).join("logs")),
        None => Ok(BaseDirs::resolve(env)?.state.join("soba").join("logs")),
    }
}

/// Where SOBA keeps its files for one workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Locations {
    /// The user config file.
    pub user_config: PathBuf,
    /// The workspace's sessions directory.
    pub sessions_dir: PathBuf,
    /// The logs directory.
    pub logs_dir: PathBuf,
    /// Whether `SOBA_HOME` decided them.
    pub from_soba_home: bool,
}

impl Locations {
    /// Resolves the locations for `workspace`: `SOBA_HOME` relocates all
    /// three; otherwise `$XDG_CONFIG_HOME/soba/config.json`,
    /// `$XDG_DATA_HOME/soba/sessions/<slug>/` and
    /// `$XDG_STATE_HOME/soba/logs/`. `session_dir` (`--session-dir`)
    /// overrides only the sessions location.
    pub fn resolve(
        env: &Env,
        workspace: &Workspace,
        session_dir: Option<&Path>,
    ) -> Result<Self, PathsError> {
        let mut locations = match env.var("SOBA_HOME")? {
            Some(home) => {
                let home = PathBuf::from(home);
                Locations {
                    user_config: home.join("config.json"),
                    sessions_dir: home.join("sessions").join(&workspace.slug),
                    logs_dir: logs_dir(env)?,
                    from_soba_home: true,
                }
            }
            None => {
                let base = BaseDirs::resolve(env)?;
                Locations {
                    user_config: base.config.join("soba").join("config.json"),
                    sessions_dir: base
                        .data
                        .join("soba")
                        .join("sessions")
                        .join(&workspace.slug),
                    logs_dir: logs_dir(env)?,
                    from_soba_home: false,
                }
            }
        };
        if let Some(dir) = session_dir {
            locations.sessions_dir = dir.to_path_buf();
        }
        Ok(locations)
    }
}

/// The three XDG base directories SOBA uses.
struct BaseDirs {
    config: PathBuf,
    data: PathBuf,
    state: PathBuf,
}

impl BaseDirs {
    /// Applies the XDG rules to `env`: an absolute `XDG_*_HOME` wins, else
    /// the default under the home directory. The home directory is `HOME`
    /// from `env`, else the one `etcetera` finds for this user.
    #[cfg(not(windows))]
    fn resolve(env: &Env) -> Result<Self, PathsError> {
        let home = match env.var("HOME")? {
            Some(home) => Some(PathBuf::from(home)),
            None => etcetera::home_dir().ok(),
        };
        let dir = |var: &str, default: &str| -> Result<PathBuf, PathsError> {
            match env.var(var)?.map(PathBuf::from).filter(|p| p.is_absolute()) {
                Some(path) => Ok(path),
                None => home
                    .as_ref()
                    .map(|home| home.join(default))
                    .ok_or(PathsError::NoHome),
            }
        };
        Ok(BaseDirs {
            config: dir("XDG_CONFIG_HOME", ".config")?,
            data: dir("XDG_DATA_HOME", ".local/share")?,
            state: dir("XDG_STATE_HOME", ".local/state")?,
        })
    }

    /// Uses the platform's known folders (`etcetera`'s Windows strategy).
    #[cfg(windows)]
    fn resolve(_env: &Env) -> Result<Self, PathsError> {
        use etcetera::BaseStrategy;
        let strategy = etcetera::choose_base_strategy().map_err(|_| PathsError::NoHome)?;
        Ok(BaseDirs {
            config: strategy.config_dir(),
            data: strategy.data_dir(),
            state: strategy.state_dir().unwrap_or_else(|| strategy.data_dir()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> Workspace {
        Workspace {
            root: PathBuf::from("/home/me/project"),
            slug: project_slug(Path::new("/home/me/project")),
        }
    }

    #[test]
    fn slug_is_basename_and_hash() {
        // sha256("/home/me/project") starts with these 8 hex digits.
        let digest = Sha256::digest(b"/home/me/project");
        let expected = format!(
            "project-{:02x}{:02x}{:02x}{:02x}",
            digest[0], digest[1], digest[2], digest[3]
        );
        assert_eq!(project_slug(Path::new("/home/me/project")), expected);
        assert_eq!(project_slug(Path::new("/")).len(), "root-".len() + 8);
    }

    #[cfg(unix)]
    #[test]
    fn location_variables_that_are_not_utf8_are_errors_not_unset() {
        use std::os::unix::ffi::OsStringExt;
        for name in [
            "SOBA_HOME",
            "HOME",
            "XDG_CONFIG_HOME",
            "XDG_DATA_HOME",
            "XDG_STATE_HOME",
        ] {
            let env = Env::from_os_pairs([
                (OsString::from("HOME"), OsString::from("/home/me")),
                (
                    OsString::from(name),
                    OsString::from_vec(b"/tmp/\xfe".to_vec()),
                ),
            ]);
            let err = Locations::resolve(&env, &workspace(), None).expect_err(name);
            assert_eq!(
                err.to_string(),
                format!(
                    "environment variable {name} is not valid UTF-8: set it to UTF-8 text (or unset it)"
                )
            );
        }
        // A variable soba does not read may hold any bytes.
        let env = Env::from_os_pairs([
            (OsString::from("SOBA_HOME"), OsString::from("/tmp/sh")),
            (
                OsString::from("LS_COLORS"),
                OsString::from_vec(b"\xff".to_vec()),
            ),
        ]);
        assert!(Locations::resolve(&env, &workspace(), None).is_ok());
    }

    #[test]
    fn soba_home_relocates_everything() {
        let env = Env::from_pairs([("SOBA_HOME", "/tmp/sh"), ("XDG_CONFIG_HOME", "/x")]);
        let ws = workspace();
        let loc = Locations::resolve(&env, &ws, None).unwrap();
        assert_eq!(loc.user_config, PathBuf::from("/tmp/sh/config.json"));
        assert_eq!(
            loc.sessions_dir,
            PathBuf::from("/tmp/sh/sessions").join(&ws.slug)
        );
        assert_eq!(loc.logs_dir, PathBuf::from("/tmp/sh/logs"));
        let overridden = Locations::resolve(&env, &ws, Some(Path::new("/s"))).unwrap();
        assert_eq!(overridden.sessions_dir, PathBuf::from("/s"));
        assert_eq!(overridden.user_config, loc.user_config);
    }

    #[cfg(not(windows))]
    #[test]
    fn xdg_rules() {
        let ws = workspace();
        let env = Env::from_pairs([
            ("HOME", "/home/me"),
            ("XDG_CONFIG_HOME", "/cfg"),
            ("XDG_DATA_HOME", "relative/is/ignored"),
        ]);
        let loc = Locations::resolve(&env, &ws, None).unwrap();
        assert_eq!(loc.user_config, PathBuf::from("/cfg/soba/config.json"));
        assert_eq!(
            loc.sessions_dir,
            PathBuf::from("/home/me/.local/share/soba/sessions").join(&ws.slug)
        );
        assert_eq!(
            loc.logs_dir,
            PathBuf::from("/home/me/.local/state/soba/logs")
        );
    }

    #[test]
    fn empty_values_are_unset() {
        let env = Env::from_pairs([("SOBA_HOME", ""), ("A", "1")]);
        assert_eq!(env.get("SOBA_HOME"), None);
        assert_eq!(env.get("A"), Some("1"));
    }
}
