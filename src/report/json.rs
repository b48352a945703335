//! `results.json`: the results model as versioned JSON (`"schema": 1`).

use std::io;

use crate::results::RunResults;

pub fn render(results: &RunResults) -> io::Result<String> {
    let mut text = serde_json::to_string_pretty(results).map_err(io::Error::other)?;
    text.push('\n');
    Ok(text)
}
