//! The machine and the account a process runs on: one source for the
//! host name that workers, leases, guards and the mode history carry, and
//! for the user that changes are recorded by.
//!
//! Both come from the operating system through `nix` (thread-safe
//! `gethostname` and `getpwuid_r`), never from files that may disagree
//! with the kernel.

/// This machine's name, as the kernel has it; `unknown` when it cannot be
/// read or is not UTF-8.
pub fn name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|name| name.into_string().ok())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// Who runs the process: `USER`, then `LOGNAME`, then the password
/// database (services and cron jobs often have neither variable);
/// `unknown` when none answers.
pub fn user() -> String {
    ["USER", "LOGNAME"]
        .into_iter()
        .find_map(|variable| std::env::var(variable).ok().filter(|u| !u.is_empty()))
        .or_else(account_name)
        .unwrap_or_else(|| "unknown".into())
}

/// `user@host` of whoever runs the process, as histories record it.
pub fn who() -> String {
    format!("{}@{}", user(), name())
}

/// The name of the account the process runs as, from the password
/// database.
fn account_name() -> Option<String> {
    let uid = nix::unistd::getuid();
    nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map(|user| user.name)
        .filter(|name| !name.is_empty())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_host_name_is_the_kernels() {
        let kernel = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        assert_eq!(super::name(), kernel.trim());
    }

    /// A process without `USER` (a service, a cron job) is still named in
    /// the history by its account.
    #[test]
    fn the_account_is_found_without_the_environment() {
        let account = super::account_name().expect("the password database has this process's user");
        assert!(
            !account.is_empty() && !account.contains('\0'),
            "{account:?}"
        );
        assert!(super::who().ends_with(&format!("@{}", super::name())));
    }
}
