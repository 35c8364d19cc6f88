//! `keelctl user scram set|delete|list`: users' SASL/SCRAM credentials (#23), over the
//! controller's AlterUserScramCredentials / DescribeUserScramCredentials (KIP-554). Kafka does
//! this with `kafka-configs --alter --add-config 'SCRAM-SHA-256=[iterations=...,password=...]'
//! --entity-type users --entity-name alice`.
//!
//! The password never leaves keelctl: it sends `Hi(password, salt, iterations)` with a fresh
//! 32-byte salt, and the controller keeps only the keys derived from that.

use std::num::NonZeroU32;

use clap::Subcommand;
use keel_metadata_log::scram::{self, DEFAULT_ITERATIONS, Mechanism};
use keel_proto::controller::{ScramCredentialDeletion, ScramCredentialUpsertion};
use serde::Serialize;

use super::{CliError, CliResult, Ctx};

/// Salt length keelctl generates, bytes.
const SALT_BYTES: usize = 32;

/// `keelctl user ...`
#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// SASL/SCRAM credentials (SCRAM-SHA-256, SCRAM-SHA-512) for the Kafka listeners named
    /// SASL_PLAINTEXT and SASL_SSL.
    #[command(subcommand)]
    Scram(ScramCommand),
}

/// `keelctl user scram ...`
#[derive(Debug, Subcommand)]
pub enum ScramCommand {
    /// Set (or replace) a user's credential for each mechanism given.
    Set(SetArgs),
    /// Delete a user's credentials (each mechanism given; default: every one it has).
    Delete(DeleteArgs),
    /// Users with credentials, their mechanisms and iterations (never keys).
    List(ListArgs),
}

/// Flags of `user scram set`.
#[derive(Debug, clap::Args)]
pub struct SetArgs {
    /// The user (the principal is `User:<name>`), 1..=256 bytes.
    #[arg(long)]
    pub user: String,
    /// The password. Visible to other local users in the process list: prefer
    /// `--password-file` or the environment variable.
    #[arg(long, env = "KEEL_SCRAM_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    /// A file whose first line is the password.
    #[arg(long, conflicts_with = "password")]
    pub password_file: Option<std::path::PathBuf>,
    /// SCRAM-SHA-256 or SCRAM-SHA-512 (repeatable; default SCRAM-SHA-256).
    #[arg(long)]
    pub mechanism: Vec<String>,
    /// PBKDF2 iterations, 4096..=16384 (Kafka's bounds and default).
    #[arg(long, default_value_t = DEFAULT_ITERATIONS)]
    pub iterations: u32,
}

/// Flags of `user scram delete`.
#[derive(Debug, clap::Args)]
pub struct DeleteArgs {
    /// The user.
    #[arg(long)]
    pub user: String,
    /// SCRAM-SHA-256 or SCRAM-SHA-512 (repeatable; default: every mechanism the user has).
    #[arg(long)]
    pub mechanism: Vec<String>,
}

/// Flags of `user scram list`.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Only these users (repeatable; default every user with a credential).
    #[arg(long)]
    pub user: Vec<String>,
}

/// The mechanisms named (deduplicated, in order), or a usage error naming the bad one.
fn mechanisms(names: &[String]) -> Result<Vec<Mechanism>, CliError> {
    let mut out = Vec::new();
    for n in names {
        let m = Mechanism::from_name(&n.to_ascii_uppercase()).ok_or_else(|| {
            CliError::usage(format!(
                "--mechanism {n:?}: not SCRAM-SHA-256 or SCRAM-SHA-512"
            ))
        })?;
        if !out.contains(&m) {
            out.push(m);
        }
    }
    Ok(out)
}

/// The password from --password / KEEL_SCRAM_PASSWORD or the first line of --password-file.
fn password(a: &SetArgs) -> Result<String, CliError> {
    let p = match (&a.password, &a.password_file) {
        (Some(p), _) => p.clone(),
        (None, Some(f)) => {
            let text = std::fs::read_to_string(f)
                .map_err(|e| CliError::usage(format!("--password-file {}: {e}", f.display())))?;
            text.lines().next().unwrap_or_default().to_owned()
        }
        (None, None) => {
            return Err(CliError::usage(
                "user scram set needs --password, --password-file or KEEL_SCRAM_PASSWORD",
            ));
        }
    };
    if p.is_empty() {
        return Err(CliError::usage("the password is empty"));
    }
    Ok(p)
}

/// Checks the flags of `set` before anything is sent (pure).
fn check_set(a: &SetArgs) -> Result<Vec<Mechanism>, CliError> {
    scram::validate_user(&a.user).map_err(|e| CliError::usage(format!("--user: {e}")))?;
    scram::validate_iterations(i64::from(a.iterations))
        .map_err(|e| CliError::usage(format!("--iterations: {e}")))?;
    let mut ms = mechanisms(&a.mechanism)?;
    if ms.is_empty() {
        ms.push(Mechanism::Sha256);
    }
    Ok(ms)
}

/// One user as printed by `list --json`.
#[derive(Debug, Serialize)]
struct UserRow {
    user: String,
    mechanisms: Vec<MechanismRow>,
}

#[derive(Debug, Serialize)]
struct MechanismRow {
    mechanism: &'static str,
    iterations: i32,
}

fn refused(user: &str, e: &keel_proto::common::Error) -> CliError {
    CliError::new(format!("user {user}: {} ({})", e.message, e.name))
}

pub(super) async fn run(c: UserCommand, ctx: &Ctx) -> CliResult {
    let UserCommand::Scram(c) = c;
    match c {
        ScramCommand::Set(a) => {
            let ms = check_set(&a)?;
            let password = password(&a)?;
            let iterations = NonZeroU32::new(a.iterations).expect("checked above");
            let rng = ring::rand::SystemRandom::new();
            let mut upsertions = Vec::with_capacity(ms.len());
            for m in &ms {
                let mut salt = vec![0u8; SALT_BYTES];
                ring::rand::SecureRandom::fill(&rng, &mut salt)
                    .map_err(|_| CliError::new("no randomness for the salt"))?;
                let salted = scram::salted_password(*m, password.as_bytes(), &salt, iterations);
                upsertions.push(ScramCredentialUpsertion {
                    name: a.user.clone(),
                    mechanism: m.to_proto() as i32,
                    iterations: i32::try_from(a.iterations).expect("checked above"),
                    salt: salt.into(),
                    salted_password: salted.into(),
                });
            }
            let results = ctx
                .admin()?
                .alter_user_scram_credentials(Vec::new(), upsertions)
                .await?;
            if let Some((u, Some(e))) = results.first() {
                return Err(refused(u, e));
            }
            let names: Vec<&str> = ms.iter().map(|m| m.name()).collect();
            if ctx.json {
                ctx.print_json(&serde_json::json!({
                    "user": a.user, "mechanisms": names, "iterations": a.iterations
                }))
            } else {
                outln!(
                    "Set {} credential{} of user {} ({} iterations).",
                    names.join(" and "),
                    if names.len() > 1 { "s" } else { "" },
                    a.user,
                    a.iterations
                );
                Ok(())
            }
        }
        ScramCommand::Delete(a) => {
            scram::validate_user(&a.user).map_err(|e| CliError::usage(format!("--user: {e}")))?;
            let admin = ctx.admin()?;
            let mut ms = mechanisms(&a.mechanism)?;
            if ms.is_empty() {
                let described = admin
                    .describe_user_scram_credentials(vec![a.user.clone()])
                    .await?;
                if let Some(r) = described.first() {
                    if let Some(e) = &r.error {
                        return Err(refused(&a.user, e));
                    }
                    ms = r
                        .credential_infos
                        .iter()
                        .filter_map(|i| Mechanism::from_proto(i.mechanism))
                        .collect();
                }
            }
            let deletions = ms
                .iter()
                .map(|m| ScramCredentialDeletion {
                    name: a.user.clone(),
                    mechanism: m.to_proto() as i32,
                })
                .collect();
            let results = admin
                .alter_user_scram_credentials(deletions, Vec::new())
                .await?;
            if let Some((u, Some(e))) = results.first() {
                return Err(refused(u, e));
            }
            let names: Vec<&str> = ms.iter().map(|m| m.name()).collect();
            if ctx.json {
                ctx.print_json(&serde_json::json!({"user": a.user, "deleted": names}))
            } else {
                outln!(
                    "Deleted {} credential{} of user {}.",
                    names.join(" and "),
                    if names.len() > 1 { "s" } else { "" },
                    a.user
                );
                Ok(())
            }
        }
        ScramCommand::List(a) => {
            let results = ctx.admin()?.describe_user_scram_credentials(a.user).await?;
            let mut rows = Vec::with_capacity(results.len());
            let mut missing = Vec::new();
            for r in results {
                if let Some(e) = &r.error {
                    missing.push(format!("user {}: {} ({})", r.user, e.message, e.name));
                    continue;
                }
                rows.push(UserRow {
                    user: r.user,
                    mechanisms: r
                        .credential_infos
                        .iter()
                        .map(|i| MechanismRow {
                            mechanism: Mechanism::from_proto(i.mechanism)
                                .map_or("UNKNOWN", Mechanism::name),
                            iterations: i.iterations,
                        })
                        .collect(),
                });
            }
            if ctx.json {
                ctx.print_json(&rows)?;
            } else {
                for r in &rows {
                    let ms: Vec<String> = r
                        .mechanisms
                        .iter()
                        .map(|m| format!("{}=[iterations={}]", m.mechanism, m.iterations))
                        .collect();
                    // kafka-configs --describe --entity-type users prints the same form.
                    outln!(
                        "SCRAM credential configs for user-principal '{}' are {}",
                        r.user,
                        ms.join(", ")
                    );
                }
            }
            if missing.is_empty() {
                Ok(())
            } else {
                Err(CliError::new(missing.join("; ")))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(user: &str, mechanism: &[&str], iterations: u32) -> SetArgs {
        SetArgs {
            user: user.into(),
            password: Some("pw".into()),
            password_file: None,
            mechanism: mechanism.iter().map(|s| s.to_string()).collect(),
            iterations,
        }
    }

    #[test]
    fn set_flags_are_checked_before_anything_is_sent() {
        assert_eq!(
            check_set(&set("alice", &[], 4096)).unwrap(),
            vec![Mechanism::Sha256]
        );
        assert_eq!(
            check_set(&set(
                "alice",
                &["scram-sha-512", "SCRAM-SHA-256", "SCRAM-SHA-512"],
                8192
            ))
            .unwrap(),
            vec![Mechanism::Sha512, Mechanism::Sha256]
        );
        let msg = |a: SetArgs| check_set(&a).unwrap_err().message;
        assert!(msg(set("alice", &["PLAIN"], 4096)).contains("--mechanism \"PLAIN\""));
        assert!(msg(set("alice", &[], 4095)).contains("--iterations: iterations 4095"));
        assert!(msg(set("", &[], 4096)).contains("--user: the user name is empty"));
        let mut a = set("alice", &[], 4096);
        a.password = None;
        assert!(
            password(&a)
                .unwrap_err()
                .message
                .contains("--password-file")
        );
    }
}
