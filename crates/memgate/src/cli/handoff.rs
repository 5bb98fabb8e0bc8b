//! `memgate handoff …`: the Handoff/Continue flow from a terminal. Each
//! step is one command, so the handoff must outlive the process: use it
//! with `postgres` or with `--url` (a running `memgate serve`); `local`
//! holds handoffs in the serving process only.

use super::error::Result;
use super::output::print_json;
use clap::{Args, Subcommand};
use memgate_core::{Acknowledgement, Caller, Handoff, HandoffContent, MemoryBackend};

#[derive(Subcommand)]
pub enum HandoffCommand {
    /// Prepare a draft of the running task (printed with its id).
    Prepare(ContentArgs),
    /// Show one of your handoffs.
    Show { id: String },
    /// Replace a draft's content (a new revision).
    Correct {
        id: String,
        #[command(flatten)]
        content: ContentArgs,
    },
    /// Freeze the draft into what a receiver continues from.
    Finalize { id: String },
    /// Print the block a receiving task's first turn carries (untrusted history).
    Continue {
        id: String,
        /// The receiving thread.
        #[arg(long)]
        thread: Option<String>,
    },
    /// Answer a prepared handoff as its receiver.
    Acknowledge {
        id: String,
        /// accepted, needs_clarification or declined (the last two need --message).
        #[arg(long, default_value = "accepted")]
        decision: String,
        #[arg(long)]
        message: Option<String>,
    },
    /// Store the handoff as one durable milestone memory, on request only.
    Commit { id: String },
}

/// What is handed over.
#[derive(Args)]
pub struct ContentArgs {
    #[arg(long)]
    objective: String,
    /// Verified progress (repeatable).
    #[arg(long)]
    progress: Vec<String>,
    /// What blocks the task (repeatable).
    #[arg(long = "blocker")]
    blockers: Vec<String>,
    #[arg(long)]
    next_action: String,
    /// Evidence behind the progress (repeatable).
    #[arg(long)]
    evidence: Vec<String>,
    /// The thread the task runs in.
    #[arg(long)]
    thread: Option<String>,
}

impl ContentArgs {
    fn content(&self) -> memgate_core::Result<HandoffContent> {
        HandoffContent::new(
            &self.objective,
            &self.progress,
            &self.blockers,
            &self.next_action,
            &self.evidence,
        )
    }
}

/// Runs one step; a handoff is printed as JSON, a continuation as its block.
pub async fn run(
    backend: &dyn MemoryBackend,
    caller: Caller,
    command: HandoffCommand,
) -> Result<()> {
    let shown: Handoff = match command {
        HandoffCommand::Prepare(args) => {
            let caller = with_thread(caller, args.thread.clone());
            backend.prepare_handoff(&caller, &args.content()?).await?
        }
        HandoffCommand::Show { id } => backend.get_handoff(&caller, &id).await?,
        HandoffCommand::Correct { id, content } => {
            backend
                .correct_handoff(&caller, &id, &content.content()?)
                .await?
        }
        HandoffCommand::Finalize { id } => backend.finalize_handoff(&caller, &id).await?,
        HandoffCommand::Continue { id, thread } => {
            let continued = backend
                .continue_handoff(&with_thread(caller, thread), &id)
                .await?;
            println!("{}", continued.block);
            return Ok(());
        }
        HandoffCommand::Acknowledge {
            id,
            decision,
            message,
        } => {
            let answer = Acknowledgement::new(&decision, message.as_deref())?;
            backend.acknowledge_handoff(&caller, &id, &answer).await?
        }
        HandoffCommand::Commit { id } => {
            let outcome = backend.commit_handoff(&caller, &id).await?;
            println!("{}", outcome.describe());
            return Ok(());
        }
    };
    print_json(&shown);
    Ok(())
}

fn with_thread(caller: Caller, thread: Option<String>) -> Caller {
    match thread {
        Some(t) => caller.with_thread(t),
        None => caller,
    }
}
