//! Bounded sign-in attempts: at most [`MAX_FAILURES`] wrong tokens per
//! [`WINDOW`], counted for the whole server. Behind a proxy every client
//! has the proxy's address, so a per-address count would bound nothing;
//! a server-wide count caps guessing at a known rate, and the price (a
//! guesser can keep the sign-in form closed for a window) is a delay for
//! the operator, never a leak. While closed, even the right token is
//! refused, so guesses made then tell nothing.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Wrong tokens allowed per window.
pub const MAX_FAILURES: u32 = 10;

/// The window failures are counted in.
pub const WINDOW: Duration = Duration::from_secs(60);

/// The count of the current window.
#[derive(Default)]
pub struct SignInThrottle {
    window: Mutex<Option<(Instant, u32)>>,
}

impl SignInThrottle {
    /// `Err(wait)` while the window's failures are used up.
    pub fn check(&self, now: Instant) -> Result<(), Duration> {
        let window = self.window.lock().unwrap_or_else(|e| e.into_inner());
        match *window {
            Some((start, failures)) if failures >= MAX_FAILURES => {
                let open_at = start + WINDOW;
                if now < open_at {
                    Err(open_at - now)
                } else {
                    Ok(())
                }
            }
            _ => Ok(()),
        }
    }

    /// Counts a wrong token.
    pub fn failed(&self, now: Instant) {
        let mut window = self.window.lock().unwrap_or_else(|e| e.into_inner());
        *window = match *window {
            Some((start, failures)) if now < start + WINDOW => Some((start, failures + 1)),
            _ => Some((now, 1)),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_in_closes_after_the_windows_failures_and_reopens_after_it() {
        let throttle = SignInThrottle::default();
        let start = Instant::now();
        for _ in 0..MAX_FAILURES {
            assert_eq!(throttle.check(start), Ok(()));
            throttle.failed(start);
        }
        let later = start + Duration::from_secs(20);
        assert_eq!(throttle.check(later), Err(WINDOW - Duration::from_secs(20)));
        let after = start + WINDOW;
        assert_eq!(throttle.check(after), Ok(()));
        throttle.failed(after);
        assert_eq!(throttle.check(after), Ok(()), "a new window counts anew");
    }
}
