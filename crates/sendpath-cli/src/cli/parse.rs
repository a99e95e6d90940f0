//! The value parsers of the flags: each refuses a bad value with what is allowed.

use sendpath_lab::traffic::RecvMode;
use sendpath_lab::units::{parse_duration, parse_size};
use std::time::Duration;

pub(super) fn transfer_sizes(s: &str) -> Result<Vec<u64>, String> {
    s.split(',')
        .map(|x| bounded_size(x, "a file size", 4096, 64 << 30).map(|v| v as u64))
        .collect()
}

pub(super) fn caches(s: &str) -> Result<Vec<sendpath_lab::study::transfer::Cache>, String> {
    s.split(',')
        .map(|x| sendpath_lab::study::transfer::Cache::parse(x.trim()))
        .collect()
}

pub(super) fn send_mode(
) -> impl clap::builder::TypedValueParser<Value = sendpath_lab::http::serve::SendMode> {
    use clap::builder::TypedValueParser;
    use sendpath_lab::http::serve::SendMode;
    clap::builder::PossibleValuesParser::new(SendMode::ALL.map(SendMode::name))
        .try_map(|s| s.parse::<SendMode>())
}

pub(super) fn body_sizes(s: &str) -> Result<Vec<usize>, String> {
    s.split(',').map(body_size).collect()
}

pub(super) fn http_servers(s: &str) -> Result<Vec<sendpath_lab::study::http::Server>, String> {
    s.split(',')
        .filter(|x| !x.trim().is_empty())
        .map(str::parse)
        .collect()
}

pub(super) fn fractions(s: &str) -> Result<Vec<f64>, String> {
    s.split(',')
        .filter(|x| !x.trim().is_empty())
        .map(|x| match x.trim().parse::<f64>() {
            Ok(f) if f > 0.0 && f <= 2.0 => Ok(f),
            _ => Err(format!(
                "`{x}`: a fraction of the peak rate, above 0 and at most 2"
            )),
        })
        .collect()
}

pub(super) fn body_size(s: &str) -> Result<usize, String> {
    // An empty body (Content-Length: 0) is a response like any other.
    if s.trim() == "0" {
        return Ok(0);
    }
    bounded_size(s, "the body size", 0, MAX_MESSAGE)
}

pub(super) fn positive_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 && r <= 1e9 => Ok(r),
        _ => Err(format!(
            "`{s}`: a rate is requests per second, above 0 and at most 1e9"
        )),
    }
}

pub(super) fn cpu_list(s: &str) -> Result<Vec<usize>, String> {
    let allowed = sendpath_host::thread::allowed_cpus().unwrap_or_default();
    s.split(',').map(|x| one_cpu(x, &allowed)).collect()
}

pub(super) fn positive_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!("`{s}`: must be longer than zero"));
    }
    Ok(d)
}

pub(super) fn hello_timeout(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d >= Duration::from_millis(100) && d <= Duration::from_secs(60) => Ok(d),
        _ => Err(format!("`{s}`: the hello timeout is 100ms..60s")),
    }
}

pub(super) fn min_wait(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d > Duration::from_millis(10) {
        return Err(format!(
            "`{s}`: a minimum wait is at most 10ms (0 turns batched waits off)"
        ));
    }
    Ok(d)
}

/// Largest message, response or receive size: one GiB.
pub(crate) const MAX_MESSAGE: usize = 1 << 30;

pub(super) fn bounded_size(s: &str, what: &str, min: usize, max: usize) -> Result<usize, String> {
    let v = parse_size(s)?;
    if v < min || v > max {
        return Err(format!(
            "`{s}`: {what} must be between {} and {}",
            sendpath_lab::units::fmt_size(min),
            sendpath_lab::units::fmt_size(max)
        ));
    }
    Ok(v)
}

pub(super) fn message_size(s: &str) -> Result<usize, String> {
    bounded_size(s, "a message size", 1, MAX_MESSAGE)
}

pub(super) fn message_sizes(s: &str) -> Result<Vec<usize>, String> {
    s.split(',').map(message_size).collect()
}

pub(super) fn recv_size(s: &str) -> Result<usize, String> {
    bounded_size(s, "the receive size", 1, MAX_MESSAGE)
}

pub(super) fn pipe_size(s: &str) -> Result<usize, String> {
    bounded_size(s, "the pipe size", 4096, 1 << 30)
}

/// `--arena`: `auto`, `off`, or the arena's size.
pub(super) fn arena(s: &str) -> Result<sendpath_lab::window::Arena, String> {
    use sendpath_lab::window::Arena;
    match s {
        "auto" => Ok(Arena::Auto),
        "off" => Ok(Arena::Off),
        _ => bounded_size(s, "the arena size", 4096, 1 << 30)
            .map(Arena::Bytes)
            .map_err(|_| {
                format!("`{s}` is not an arena: give auto, off, or a size of 4KiB..1GiB, e.g. 4M")
            }),
    }
}

pub(super) fn file_size(s: &str) -> Result<usize, String> {
    bounded_size(s, "the file size", 4096, 1 << 40)
}

/// `--recv`: the modes' names, listed in `--help` and in the error for any other value.
pub(super) fn recv_mode() -> impl clap::builder::TypedValueParser<Value = RecvMode> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(RecvMode::ALL.map(RecvMode::name))
        .try_map(|s| s.parse::<RecvMode>())
}

pub(super) fn count_list(s: &str) -> Result<Vec<usize>, String> {
    s.split(',')
        .map(|x| match x.trim().parse::<usize>() {
            Ok(0) | Err(_) => Err(format!("`{x}` is not a positive whole number")),
            Ok(n) => Ok(n),
        })
        .collect()
}

/// `-s`/`--strategy`: [`strategy_list`], naming the paths for shell completion.
#[derive(Clone)]
pub(super) struct Strategies;

impl clap::builder::TypedValueParser for Strategies {
    type Value = Vec<sendpath::Strategy>;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Self::Value, clap::Error> {
        let s = clap::builder::StringValueParser::new().parse_ref(cmd, arg, value)?;
        strategy_list(&s).map_err(|e| {
            let flag = arg.map_or("--strategy".into(), |a| a.to_string());
            clap::Error::raw(
                clap::error::ErrorKind::InvalidValue,
                format!("invalid value '{s}' for '{flag}': {e}\n"),
            )
            .with_cmd(cmd)
        })
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        let names = sendpath::Strategy::ALL.map(|s| s.name());
        let all = names.into_iter().chain(["all"]);
        Some(Box::new(all.map(clap::builder::PossibleValue::new)))
    }
}

pub(super) fn strategy_list(s: &str) -> Result<Vec<sendpath::Strategy>, String> {
    if s == "all" {
        return Ok(sendpath::Strategy::ALL.to_vec());
    }
    s.split(',')
        .map(|x| sendpath::Strategy::parse(x.trim()).map_err(|e| e.to_string()))
        .collect()
}

pub(super) fn runtime_list(s: &str) -> Result<Vec<sendpath_lab::traffic::Runtime>, String> {
    use sendpath_lab::traffic::Runtime;
    let all = [Runtime::Thread, Runtime::Tokio, Runtime::TokioWrite];
    let one = |x: &str| {
        all.into_iter().find(|r| r.name() == x).ok_or_else(|| {
            format!("`{x}` is not a runtime: use thread, tokio or tokio-write (comma-separated)")
        })
    };
    let mut v: Vec<Runtime> = s
        .split(',')
        .map(|x| one(x.trim()))
        .collect::<Result<_, _>>()?;
    v.dedup();
    Ok(v)
}

pub(super) fn alloc_list(s: &str) -> Result<Vec<sendpath_lab::traffic::mix::Alloc>, String> {
    s.split(',').map(|x| x.trim().parse()).collect()
}

pub(super) fn size_mix(s: &str) -> Result<sendpath_lab::traffic::mix::SizeMix, String> {
    sendpath_lab::traffic::mix::SizeMix::parse(s, MAX_MESSAGE)
}

pub(super) fn cpu_pair(s: &str) -> Result<(usize, usize), String> {
    let (a, b) = s
        .split_once(',')
        .ok_or_else(|| format!("`{s}`: give two CPUs, sender then receiver, e.g. 0,1"))?;
    let allowed = sendpath_host::thread::allowed_cpus().unwrap_or_default();
    Ok((one_cpu(a, &allowed)?, one_cpu(b, &allowed)?))
}

/// A CPU number this process may run on (`allowed` empty: any).
pub(super) fn one_cpu(x: &str, allowed: &[usize]) -> Result<usize, String> {
    let c = x
        .trim()
        .parse::<usize>()
        .map_err(|_| format!("`{x}` is not a CPU number"))?;
    if !allowed.is_empty() && !allowed.contains(&c) {
        return Err(format!(
            "CPU {c} is not one this process may run on; the allowed CPUs are {}",
            allowed
                .iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(",")
        ));
    }
    Ok(c)
}

/// `--proto`: tcp or udp.
pub(crate) fn protocol(s: &str) -> Result<sendpath_lab::traffic::datagram::Protocol, String> {
    s.parse()
}
