//! The built binary end to end: exit codes, signal handling, event lines.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

fn testbox(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_testbox"));
    command
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Starts testbox and returns once it printed its `started` line (its signal handlers are
/// installed before that line is printed).
fn spawn_started(args: &[&str]) -> (Child, BufReader<ChildStdout>) {
    let mut child = testbox(args).spawn().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(
        line.starts_with("testbox: started "),
        "first line: {line:?}"
    );
    (child, stdout)
}

fn rest(mut stdout: BufReader<ChildStdout>) -> String {
    let mut text = String::new();
    stdout.read_to_string(&mut text).unwrap();
    text
}

fn signal(child: &Child, signal: Signal) {
    kill(Pid::from_raw(child.id() as i32), signal).unwrap();
}

#[test]
fn exit_codes() {
    // (args, want exit code, want stdout fragment)
    let cases: &[(&[&str], i32, &str)] = &[
        (&["exit", "--code", "3"], 3, "testbox: exiting with 3\n"),
        (
            &["exit", "--code", "0", "--after", "50ms"],
            0,
            "exiting with 0",
        ),
        (
            &["serve", "--exit-after", "100ms", "--exit-code", "4"],
            4,
            "exit-after elapsed",
        ),
        (&["sleep", "0.05"], 0, "sleep done"),
        (
            &["alloc", "--mib", "16", "--chunk-mib", "4"],
            0,
            "allocated 16 MiB",
        ),
        (&["exit"], 2, ""),
    ];
    for (args, want_code, want_text) in cases {
        let output = testbox(args).output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert_eq!(output.status.code(), Some(*want_code), "{args:?}: {stdout}");
        assert!(stdout.contains(want_text), "{args:?}: {stdout}");
    }
}

#[test]
fn sigterm_exits_zero_by_default() {
    let (mut child, stdout) = spawn_started(&["sleep"]);
    signal(&child, Signal::SIGTERM);
    let status = child.wait().unwrap();
    let text = rest(stdout);
    assert_eq!(status.code(), Some(0), "{text}");
    assert!(text.contains("testbox: received SIGTERM\n"), "{text}");
    assert!(text.ends_with("testbox: exiting with 0\n"), "{text}");
}

#[test]
fn sigterm_delay_and_exit_code_are_honoured_and_logged() {
    let dir = tempfile::tempdir().unwrap();
    let event_file = dir.path().join("events");
    let (mut child, mut stdout) = spawn_started(&[
        "serve",
        "--sigterm-delay",
        "2s",
        "--sigterm-exit-code",
        "7",
        "--event-file",
        event_file.to_str().unwrap(),
    ]);
    let sent = Instant::now();
    signal(&child, Signal::SIGTERM);
    // The second signal goes only once the first was handled: two SIGTERMs pending at once are
    // one for the kernel, and the test would not be about a signal during the delay.
    let mut line = String::new();
    while !line.contains("exiting in") {
        line.clear();
        let read = stdout.read_line(&mut line).unwrap();
        assert!(read > 0, "testbox ended before its termination delay");
    }
    signal(&child, Signal::SIGTERM);
    let status = child.wait().unwrap();
    let text = rest(stdout);
    assert_eq!(status.code(), Some(7), "{text}");
    assert!(sent.elapsed() >= Duration::from_secs(2), "{text}");
    assert!(
        text.contains("received SIGTERM (already terminating)"),
        "{text}"
    );

    let events = std::fs::read_to_string(&event_file).unwrap();
    let names: Vec<&str> = events
        .lines()
        .map(|line| line.split_once(' ').unwrap().1)
        .collect();
    assert_eq!(
        names,
        [
            "started serve (pid ".to_owned() + &child.id().to_string() + ")",
            "health: healthy".to_owned(),
            "received SIGTERM".to_owned(),
            "exiting in 2s".to_owned(),
            "received SIGTERM (already terminating)".to_owned(),
            "exiting with 7".to_owned(),
        ]
    );
}

#[test]
fn ignored_sigterm_keeps_running_until_sigkill() {
    let (mut child, mut stdout) = spawn_started(&["--on-sigterm", "ignore", "sleep", "infinity"]);
    signal(&child, Signal::SIGTERM);
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "testbox: received SIGTERM\n");
    line.clear();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "testbox: ignoring SIGTERM\n");
    std::thread::sleep(Duration::from_millis(200));
    assert!(child.try_wait().unwrap().is_none(), "should still run");
    signal(&child, Signal::SIGKILL);
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(9));
}

#[test]
fn cat_copies_stdin_to_stdout() {
    use std::io::Write;
    let mut child = testbox(&["cat"]).stdin(Stdio::piped()).spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"one\ntwo\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("testbox: started cat (pid "), "{text:?}");
    assert!(
        text.ends_with("\none\ntwo\ntestbox: exiting with 0\n"),
        "{text:?}"
    );
}
