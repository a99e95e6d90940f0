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

/// What every HTML report's style ends with so it reads on a phone as on a laptop: charts
/// shrink to the width of the screen (they carry a viewBox), wide tables scroll sideways
/// instead of running off the page, and the margins narrow on small screens.
pub(crate) const NARROW_SCREENS_CSS: &str = "svg{max-width:100%;height:auto}\
     table{display:block;overflow-x:auto;max-width:100%}\
     @media (max-width:700px){body{margin:.6em}h1{font-size:1.5em}h2{font-size:1.15em}}";

/// The head of an HTML report: its title, a viewport for phones, and its style.
pub(crate) fn html_head(title: &str, css: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title}</title>\n<style>{css}{NARROW_SCREENS_CSS}</style></head><body>\n<h1>{title}</h1>\n"
    )
}
