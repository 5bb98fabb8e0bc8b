//! The terminal around the turn loop: the prompt, standard input read off
//! the runtime, Ctrl-C (at the prompt it leaves, during a turn it drops that
//! turn), and the flushed writes everything shown goes through.

use super::turn::ChatSession;
use crate::cli::error::{CliError, Result};
use std::io::{BufRead, Write};

/// Talks with the user until `/quit`, end of input or Ctrl-C at the prompt,
/// then waits for running captures.
pub(super) async fn run(mut session: ChatSession) -> Result<()> {
    let mut out = std::io::stdout();
    session.banner(&mut out);

    let mut lines = stdin_lines();
    loop {
        print_flush(&mut out, "you> ");
        // Ctrl-C at the prompt leaves like /quit.
        let line = tokio::select! {
            line = lines.recv() => line,
            _ = tokio::signal::ctrl_c() => {
                line_out(&mut out, "");
                break;
            }
        };
        let line = match line {
            Some(Ok(line)) => line,
            None => break,
            Some(Err(e)) => return Err(CliError::io("cannot read input", e)),
        };
        match line.trim() {
            "" => {}
            "/quit" | "/exit" => break,
            "/new" => session.new_thread(&mut out).await,
            command if command.starts_with('/') => {
                line_out(&mut out, "commands: /new (new thread), /quit")
            }
            input => {
                // Ctrl-C during a turn drops that turn (as a model failure
                // does) and returns to the prompt.
                let before = session.transcript.len();
                let finished = tokio::select! {
                    result = session.turn(input, &mut out) => Some(result),
                    _ = tokio::signal::ctrl_c() => None,
                };
                match finished {
                    Some(Ok(())) => {}
                    Some(Err(e)) => line_out(&mut out, &format!("error: {e}")),
                    None => {
                        session.transcript.truncate(before);
                        line_out(&mut out, "\n(interrupted: this turn was dropped)");
                    }
                }
            }
        }
    }
    // Captures already running finish before the chat leaves; a second
    // Ctrl-C leaves at once.
    tokio::select! {
        () = session.finish(&mut out) => {}
        _ = tokio::signal::ctrl_c() => line_out(&mut out, "(left without waiting for the last capture)"),
    }
    Ok(())
}

/// Lines of standard input, read on a thread of their own: a read still
/// blocked at the prompt when Ctrl-C ends the chat must not hold the process
/// (a Tokio stdin read would keep the runtime's shutdown waiting for Enter).
fn stdin_lines() -> tokio::sync::mpsc::Receiver<std::io::Result<String>> {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            if tx.blocking_send(line).is_err() {
                break;
            }
        }
    });
    rx
}

pub(super) fn print_flush(out: &mut dyn Write, text: &str) {
    let _ = write!(out, "{text}");
    let _ = out.flush();
}

pub(super) fn line_out(out: &mut dyn Write, text: &str) {
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}
