//! What every study's summary and report share: tables rendered as Markdown and HTML, HTML
//! escaping, the environment line and the SVG line charts ([`plot`]). Reads results; no study
//! module is imported here.

pub(crate) mod plot;

use std::fmt::Write as _;

/// A table rendered both as Markdown and as HTML.
pub(crate) struct Table {
    pub(crate) title: String,
    pub(crate) headers: Vec<String>,
    pub(crate) rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(title: &str, headers: &[&str]) -> Table {
        Table {
            title: title.into(),
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub(crate) fn md(&self) -> String {
        let mut s = format!(
            "## {}\n\n| {} |\n|{}\n",
            self.title,
            self.headers.join(" | "),
            "---|".repeat(self.headers.len())
        );
        for r in &self.rows {
            let _ = writeln!(s, "| {} |", r.join(" | "));
        }
        s.push('\n');
        s
    }

    pub(crate) fn html(&self) -> String {
        let mut s = format!("<h2>{}</h2>\n<table>\n<tr>", esc(&self.title));
        for h in &self.headers {
            let _ = write!(s, "<th>{}</th>", esc(h));
        }
        s.push_str("</tr>\n");
        for r in &self.rows {
            s.push_str("<tr>");
            for c in r {
                let _ = write!(s, "<td>{}</td>", esc(c));
            }
            s.push_str("</tr>\n");
        }
        s.push_str("</table>\n");
        s
    }
}

pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The host and command of a run: kernel, CPUs, version, command line.
pub(crate) fn environment_line_of(e: &crate::results::Environment) -> String {
    format!(
        "kernel {}, {} x {}, sendpath {}, command: `{}`",
        e.kernel,
        e.probe.cpus,
        e.cpu,
        e.sendpath_version,
        e.command_line.join(" ")
    )
}
