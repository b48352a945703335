use super::*;

const HF: &str = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789";

#[test]
fn secret_names_are_whole_segments() {
    for name in [
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "WANDB_API_KEY",
        "OPENAI_API_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "GITHUB_TOKEN",
        "DB_PASSWORD",
        "PGPASSWORD",
        "MYSQL_PWD",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "SENTRY_DSN",
        "hf_token",
        "apiKey",
        "NPM_CONFIG__AUTH",
        "OOMGATE_HASH_KEY",
        "DB_PASS",
        "SMTP_PASS",
        "GH_PAT",
        "SLACK_WEBHOOK",
        "DISCORD_WEBHOOK_URL",
    ] {
        assert!(is_secret_name(name), "{name} should be secret");
    }
    for name in [
        "TOKENIZERS_PARALLELISM",
        "MAX_NEW_TOKENS",
        "PWD",
        "OLDPWD",
        "PYTORCH_CUDA_ALLOC_CONF",
        "CUDA_VISIBLE_DEVICES",
        "KEYBOARD",
        "MONKEY_BUSINESS",
        "HOME",
        "PATH",
        "BYPASS",
        "CACHE_BYPASS",
        "PATH_PREFIX",
        "COMPASS",
    ] {
        assert!(!is_secret_name(name), "{name} should not be secret");
    }
}

#[test]
fn secret_flags_are_judged_by_their_last_segment() {
    for flag in [
        "--token",
        "--api-key",
        "--hf-token",
        "--hf_token",
        "--password",
        "-token",
        "db.password",
        "--apiKey",
    ] {
        assert!(is_secret_flag(flag), "{flag}");
    }
    for flag in [
        "--num-key-value-heads",
        "--max-new-tokens",
        "--token-file",
        "--batch",
        "--tokenizer",
        "--cache-key",
        "--key",
        "--session",
        "--private",
    ] {
        assert!(!is_secret_flag(flag), "{flag}");
    }
}

#[test]
fn commands_lose_the_values_of_secret_flags_and_token_shapes() {
    let argv: Vec<String> = [
        "python3",
        "serve.py",
        "--api-key=sk-proj-abcdefghijklmnopqrstuvwxyz",
        "--token",
        "tok-value-123",
        "--hf-token",
        "--batch",
        "64",
        "wandb.api_key=abcdef123456",
        "--max-new-tokens",
        "256",
        &format!("--model-url=https://user:pa55word@example.com/m?auth={HF}"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(
        command(&argv),
        [
            "python3",
            "serve.py",
            "--api-key=***",
            "--token",
            "***",
            "--hf-token",
            "--batch",
            "64",
            "wandb.api_key=***",
            "--max-new-tokens",
            "256",
            "--model-url=https://user:***@example.com/m?auth=***",
        ]
    );
}

#[test]
fn shapes_are_masked_in_text() {
    let r = Redactor::default();
    let cases = [
        (format!("login with {HF} now"), "login with *** now"),
        (
            "key ghp_0123456789abcdefghijABCDEFGHIJ0123 x".to_string(),
            "key *** x",
        ),
        ("id AKIAIOSFODNN7EXAMPLE used".to_string(), "id *** used"),
        (
            "Authorization: Bearer abc.def-ghi_jkl".to_string(),
            "Authorization: Bearer ***",
        ),
        (
            "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTYifQ.c2lnbmF0dXJlLXZhbHVl end".to_string(),
            "jwt *** end",
        ),
        (
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nAAAA==\n-----END RSA PRIVATE KEY-----\nnext"
                .to_string(),
            "***\nnext",
        ),
        ("password=hunter22 ok".to_string(), "password=*** ok"),
        (
            "post to https://hooks.slack.com/services/T0123ABCD/B0456EFGH/abcdefghijklmnopqrstuvwx now".to_string(),
            "post to https://hooks.slack.com/services/*** now",
        ),
        (
            "hook https://discord.com/api/webhooks/123456789012345678/AbCdEfGhIjKlMnOpQrStUvWxYz-_0123 ok".to_string(),
            "hook https://discord.com/api/webhooks/*** ok",
        ),
        // Numbers and short words after `token:` are not secrets.
        ("token: 512 of 2048".to_string(), "token: 512 of 2048"),
        ("max_new_tokens=256".to_string(), "max_new_tokens=256"),
    ];
    for (text, expected) in cases {
        assert_eq!(r.mask(&text), expected, "{text}");
    }
}

#[test]
fn secret_values_of_the_environment_are_masked_but_not_short_numeric_or_boolean() {
    let r = Redactor::new(
        [
            ("MY_SERVICE_TOKEN", "plainvalue-123"),
            ("DB_PASSWORD", "false"),
            ("SOME_KEY", "256"),
            ("SESSION_ID", "abc"),
            ("BATCH", "not-a-secret-at-all"),
        ],
        &[],
    );
    assert_eq!(r.secret_count(), 1);
    assert_eq!(
        r.mask("auth plainvalue-123, false 256 abc not-a-secret-at-all"),
        "auth ***, false 256 abc not-a-secret-at-all"
    );
}

#[test]
fn suite_patterns_mask_their_first_group_or_the_whole_match() {
    let patterns = vec![
        r"internal-[0-9a-f]{8}".to_string(),
        r"ticket=(\w+)".to_string(),
    ];
    let r = Redactor::new([], &patterns);
    assert_eq!(
        r.mask("id internal-deadbeef ticket=XYZ123 end"),
        "id *** ticket=*** end"
    );
    // The written pass applies no suite pattern (it could span markup).
    assert_eq!(
        r.mask_written("id internal-deadbeef"),
        "id internal-deadbeef"
    );
}

#[test]
fn bad_patterns_are_refused() {
    assert!(compile_pattern("(").is_err());
    assert!(compile_pattern("").is_err());
    assert!(compile_pattern("a*").is_err());
    assert!(compile_pattern("a+").is_ok());
}

#[test]
fn recorded_hashes_detect_a_change_and_hide_the_value() {
    let a = secret_value("HF_TOKEN", HF);
    let b = secret_value("HF_TOKEN", "hf_another");
    assert!(is_recorded_hash(&a));
    assert!(!a.contains("hf_"));
    assert_ne!(a, b);
    assert_eq!(a, secret_value("HF_TOKEN", HF));
    // The same value under another name hashes differently.
    assert_ne!(a, secret_value("OTHER_TOKEN", HF));
    assert_eq!(env_value("HF_TOKEN", HF), a);
    assert_eq!(env_value("HF_TOKEN", &a), a);
    assert_eq!(env_value("BATCH", "64"), "64");
    assert!(!is_recorded_hash("<secret xyz>"));
}

#[test]
fn masking_written_text_keeps_json_and_xml_well_formed() {
    let r = Redactor::new([("A_TOKEN", "s3cr3t-value")], &[]);
    let value = serde_json::json!({
        "out": format!("x s3cr3t-value {HF} \"password=hunter22\" https://u:p@h/ <a&b>"),
    });
    let text = serde_json::to_string(&value).unwrap_or_default();
    let masked = r.mask_written(&text);
    let parsed: serde_json::Value = serde_json::from_str(&masked).unwrap_or_default();
    let out = parsed["out"].as_str().unwrap_or_default();
    assert!(
        !out.contains("s3cr3t") && !out.contains("hf_") && !out.contains(":p@"),
        "{out}"
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// Whatever the text, masking a JSON document keeps it valid JSON.
    #[test]
    fn masked_json_stays_json(text in ".{0,200}") {
        let r = Redactor::new([("A_TOKEN", "s3cr3t-value")], &[]);
        let json = serde_json::to_string(&serde_json::json!({ "t": text })).unwrap_or_default();
        let masked = r.mask_written(&json);
        proptest::prop_assert!(serde_json::from_str::<serde_json::Value>(&masked).is_ok());
    }

    /// A registered secret never survives masking, wherever it sits.
    #[test]
    fn a_secret_never_survives(before in "[ -~]{0,40}", after in "[ -~]{0,40}") {
        let secret = "Zq9-secret-Value-77";
        let r = Redactor::new([("X_SECRET", secret)], &[]);
        let text = format!("{before}{secret}{after}");
        proptest::prop_assert!(!r.mask(&text).contains(secret));
    }
}

/// Linear time on text built to be hard for each shape: near-misses of
/// every token format, millions of characters long, within a generous bound
/// (the regex engine guarantees linear matching; this keeps it so).
#[test]
fn masking_adversarial_text_is_linear() {
    let r = Redactor::new(
        [("A_TOKEN", "s3cr3t-value"), ("B_TOKEN", "s3cr3t-valuf")],
        &["x+y".to_string()],
    );
    let near_misses = "hf_short sk-x ghp_ eyJ.eyJ. password= token:\t -----BEGIN PRIVATE KEY----- https://a:b Authorization: Bearer s3cr3t-valu xxxxxxxx ";
    let text = near_misses.repeat(40_000);
    let start = std::time::Instant::now();
    let masked = r.mask(&text);
    assert!(masked.len() <= text.len());
    assert!(start.elapsed() < std::time::Duration::from_secs(60));
}

#[test]
fn secret_flags_inside_a_shell_string_are_found_and_masked() {
    let argv: Vec<String> = [
        "bash",
        "-c",
        "serve --api-key Zq9XmB27LpQw4 --token 'Kd82 HsP0aQx' --batch 8",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(secret_arguments(&argv), ["Zq9XmB27LpQw4", "Kd82 HsP0aQx"]);
    assert_eq!(
        command(&argv)[2],
        "serve --api-key *** --token '***' --batch 8"
    );
}

#[test]
fn written_masking_keeps_oomgates_records_escapes_and_entities() {
    let r = Redactor::new(
        [
            ("A_TOKEN", "ecret 3fa9c1"),
            ("B_TOKEN", "nSecretTail99"),
            ("C_TOKEN", "amp;Secret77"),
        ],
        &[],
    );
    // oomgate's own record of another secret is not a secret.
    assert_eq!(
        r.mask_written("env X: <secret 3fa9c1>"),
        "env X: <secret 3fa9c1>"
    );
    // `\n` followed by the rest of a secret is an escape, not the secret.
    assert_eq!(
        r.mask_written(r#""a\nSecretTail99""#),
        r#""a\nSecretTail99""#
    );
    assert_eq!(r.mask_written(r#""a nSecretTail99""#), r#""a ***""#);
    // An entity is not cut.
    assert_eq!(r.mask_written("x &amp;Secret77 y"), "x &amp;Secret77 y");
}

#[test]
fn a_pattern_alternative_without_the_group_masks_the_whole_match() {
    let r = Redactor::new([], &[r"ticket=(\w+)|internal-[0-9]{6}".to_string()]);
    assert_eq!(r.mask("ticket=abc internal-424242"), "ticket=*** ***");
}

#[test]
fn weak_secrets_are_recorded_without_a_hash_and_plain_words_are_not_masked() {
    assert_eq!(secret_value("DB_PASSWORD", "4821"), "<secret>");
    assert_eq!(secret_value("DESKTOP_SESSION", "ubuntu"), "<secret>");
    assert!(is_recorded_hash("<secret>"));
    assert_ne!(secret_value("HF_TOKEN", HF), "<secret>");
    let r = Redactor::new([("DESKTOP_SESSION", "ubuntu")], &[]);
    assert_eq!(r.secret_count(), 0);
    assert_eq!(r.mask("Ubuntu ubuntu"), "Ubuntu ubuntu");
}
