//! An app's session as its statements' values are evaluated: the role,
//! the settings PostgreSQL reports to it, and the `search_path` the proxy
//! asks it for ([`AppSession`]), each set again for each evaluation
//! ([`super::Evaluator`]).

use legacy::LegacyStore;

use super::{serve, Evaluator};

/// An app's session, as its statements' values are evaluated: the role
/// it logged in as and the settings PostgreSQL reported to it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AppSession {
    pub role: String,
    /// (name, value) of the [`AppSession::REPORTED`] settings, as
    /// PostgreSQL last reported them.
    pub settings: Vec<(String, String)>,
}

impl AppSession {
    /// The settings PostgreSQL reports to a session (`ParameterStatus`)
    /// that change what a value written as text means.
    pub const REPORTED: [&'static str; 3] = ["TimeZone", "DateStyle", "IntervalStyle"];

    pub fn new(role: &str) -> AppSession {
        AppSession {
            role: role.to_string(),
            settings: Vec::new(),
        }
    }

    /// Takes a reported setting; whether it is one that matters (and
    /// changed).
    pub fn reported(&mut self, name: &str, value: &str) -> bool {
        match AppSession::REPORTED.iter().find(|n| **n == name) {
            Some(name) => self.set(name, value),
            None => false,
        }
    }

    /// Takes the session's `search_path` (as `current_setting` shows it),
    /// which PostgreSQL does not report: the proxy asks the session.
    /// Whether it changed.
    pub fn found_search_path(&mut self, value: &str) -> bool {
        self.set("search_path", value)
    }

    /// Sets `name` to `value`; whether that changed it.
    fn set(&mut self, name: &str, value: &str) -> bool {
        match self.settings.iter_mut().find(|(n, _)| n == name) {
            Some((_, v)) if v == value => false,
            Some((_, v)) => {
                *v = value.to_string();
                true
            }
            None => {
                self.settings.push((name.to_string(), value.to_string()));
                true
            }
        }
    }

    /// Its values' evaluator on `legacy`.
    pub fn evaluator<'a>(&'a self, legacy: &'a LegacyStore) -> Evaluator<'a> {
        Evaluator {
            legacy,
            role: Some(&self.role),
            settings: &self.settings,
        }
    }
}

/// `search_path` as `current_setting` shows it (`"$user", public`,
/// `"My Schema", app`) as the list `SET` takes, each name quoted, split as
/// PostgreSQL splits it (a bare name folded to lower case); `''` for an
/// empty path; `None` for a value that does not split.
pub(super) fn search_path_list(value: &str) -> Option<String> {
    let mut rest = value.trim();
    if rest.is_empty() || rest == "\"\"" {
        return Some("''".into());
    }
    let mut names = Vec::new();
    loop {
        let (name, after) = match rest.strip_prefix('"') {
            Some(quoted) => {
                let mut name = String::new();
                let mut end = None;
                let mut chars = quoted.char_indices().peekable();
                while let Some((i, c)) = chars.next() {
                    match c {
                        '"' if chars.peek().map(|(_, c)| *c) == Some('"') => {
                            name.push('"');
                            chars.next();
                        }
                        '"' => {
                            end = Some(i + 1);
                            break;
                        }
                        c => name.push(c),
                    }
                }
                (name, &quoted[end?..])
            }
            None => {
                let end = rest.find(',').unwrap_or(rest.len());
                let bare = rest[..end].trim();
                if bare.contains(|c: char| c.is_whitespace() || c == '"') {
                    return None;
                }
                (bare.to_ascii_lowercase(), &rest[end..])
            }
        };
        if name.is_empty() {
            return None;
        }
        names.push(serve::quote(&name));
        let after = after.trim_start();
        match after.strip_prefix(',') {
            Some(more) => rest = more.trim_start(),
            None if after.is_empty() => break,
            None => return None,
        }
    }
    Some(names.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_search_path_is_set_as_the_list_it_is() {
        for (shown, list) in [
            ("\"$user\", public", "\"$user\", \"public\""),
            ("Archive,public", "\"archive\", \"public\""),
            (
                "\"My \"\"odd\"\", schema\" , app",
                "\"My \"\"odd\"\", schema\", \"app\"",
            ),
            ("\"\"", "''"),
            ("", "''"),
        ] {
            assert_eq!(search_path_list(shown).as_deref(), Some(list), "{shown}");
        }
        for bad in ["a b", "a,,b", "\"open", "\"a\"b", "a,"] {
            assert_eq!(search_path_list(bad), None, "{bad}");
        }
        let mut s = AppSession::new("app");
        assert!(s.found_search_path("archive, public"));
        assert!(!s.found_search_path("archive, public"), "unchanged");
        assert!(s.found_search_path("public"));
        assert_eq!(
            s.settings,
            [("search_path".to_string(), "public".to_string())]
        );
    }

    #[test]
    fn a_session_keeps_the_settings_that_change_a_value() {
        let mut s = AppSession::new("app");
        assert!(s.reported("TimeZone", "Asia/Kolkata"));
        assert!(!s.reported("TimeZone", "Asia/Kolkata"), "unchanged");
        assert!(s.reported("DateStyle", "SQL, DMY"));
        assert!(s.reported("TimeZone", "UTC"));
        assert!(
            !s.reported("application_name", "psql"),
            "not one that matters"
        );
        assert_eq!(
            s.settings,
            [
                ("TimeZone".to_string(), "UTC".to_string()),
                ("DateStyle".to_string(), "SQL, DMY".to_string())
            ]
        );
    }
}
