//! Which setting of a run an error is about. The lab describes the problem in its own terms;
//! the command line finds the [`SettingError`] in the error's chain and names the flag that
//! sets it.

/// A setting of a run that a user chooses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    /// Where `sendpath agent` runs.
    Agent,
    /// The token file presented to the agent or required by it.
    TokenFile,
    /// The address a receiver or the agent listens on.
    Listen,
    /// Another program's receiver to send to.
    Connect,
    /// Connections per sender thread (one io_uring ring).
    Connections,
    /// A message size mix, or fresh buffers per message.
    SizeMix,
    /// The network namespace a run creates.
    Topology,
    /// The file the receiver writes.
    SinkFile,
    /// Warm or cold page cache.
    Cache,
    /// The source file's size.
    FileSize,
    /// How long a receiver waits for data.
    Timeout,
    /// The sweep directory to continue.
    Resume,
    /// The TCP congestion control the connections ask for.
    Congestion,
    /// How a UDP message is cut into datagrams: its size, the GSO segment, the route's MTU.
    Datagram,
}

/// What is wrong with a setting, in the lab's terms.
#[derive(Debug)]
pub struct SettingError {
    /// The setting.
    pub setting: Setting,
    /// What is wrong, and what to do.
    pub message: String,
}

impl std::fmt::Display for SettingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SettingError {}

/// An error about `setting`.
pub fn invalid(setting: Setting, message: impl Into<String>) -> anyhow::Error {
    SettingError {
        setting,
        message: message.into(),
    }
    .into()
}

/// Ties an error to the setting it is about.
pub trait About<T> {
    /// The error, with `message` about `setting` as its context.
    fn about(self, setting: Setting, message: impl FnOnce() -> String) -> anyhow::Result<T>;
}

impl<T, E> About<T> for Result<T, E>
where
    E: Into<anyhow::Error>,
{
    fn about(self, setting: Setting, message: impl FnOnce() -> String) -> anyhow::Result<T> {
        self.map_err(|e| {
            e.into().context(SettingError {
                setting,
                message: message(),
            })
        })
    }
}

/// The setting an error is about, if the lab said.
pub fn of(e: &anyhow::Error) -> Option<Setting> {
    e.downcast_ref::<SettingError>().map(|s| s.setting)
}

/// Whether an error's chain holds an I/O call whose socket timeout ran out.
pub(crate) fn timed_out(e: &anyhow::Error) -> bool {
    io_error_in(e, is_timeout)
}

/// Whether an error's chain holds an I/O error for which `f` holds.
pub(crate) fn io_error_in(e: &anyhow::Error, f: impl Fn(&std::io::Error) -> bool) -> bool {
    e.chain()
        .any(|c| c.downcast_ref::<std::io::Error>().is_some_and(&f))
}

/// Whether a read failed because its socket's read timeout ran out.
pub(crate) fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_is_found_under_other_context() {
        let e: Result<(), std::io::Error> = Err(std::io::Error::other("refused"));
        let e = e
            .about(Setting::Connect, || "cannot connect to 127.0.0.1:1".into())
            .map_err(|e| e.context("round 2"))
            .unwrap_err();
        assert_eq!(of(&e), Some(Setting::Connect));
        assert_eq!(
            format!("{e:#}"),
            "round 2: cannot connect to 127.0.0.1:1: refused"
        );
        assert_eq!(of(&anyhow::anyhow!("plain")), None);
        assert_eq!(of(&invalid(Setting::Resume, "x")), Some(Setting::Resume));
    }
}
