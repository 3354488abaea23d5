//! Running the `silt` binary from the CLI scenario tests.

use assert_cmd::Command;
use serde_json::Value;

/// The `silt` binary built for this test run.
pub fn silt() -> Command {
    Command::cargo_bin("silt").unwrap()
}

/// Runs `cmd`, asserts it exits with `code`, and returns (stdout, stderr).
pub fn run(cmd: &mut Command, code: i32) -> (String, String) {
    let assert = cmd.assert().code(code);
    let out = assert.get_output();
    (
        String::from_utf8(out.stdout.clone()).unwrap(),
        String::from_utf8(out.stderr.clone()).unwrap(),
    )
}

/// Runs `silt args...`, asserts success, and returns its stdout.
pub fn stdout(args: &[&str]) -> String {
    run(silt().args(args), 0).0
}

/// Runs `silt args... --json`, asserts success, and parses its stdout as one JSON document.
pub fn json(args: &[&str]) -> Value {
    serde_json::from_str(&stdout(&[args, &["--json"]].concat())).expect("valid JSON")
}

/// Parses JSON-lines output.
pub fn json_lines(out: &str) -> Vec<Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Runs `silt args...` with its stdout a pipe whose reading end is already closed (as after
/// `| head -0`); returns its exit status.
pub fn status_into_closed_pipe(args: &[&str]) -> Option<i32> {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    std::process::Command::new(env!("CARGO_BIN_EXE_silt"))
        .args(args)
        .stdout(writer)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .code()
}
