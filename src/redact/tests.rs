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
        "--model=sk-learn-logistic-regression-large",
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
            // A credential by its syntax goes; a token's look-alike in the
            // suite's own text stays (the suite is committed beside the lock).
            &format!("--model-url=https://user:***@example.com/m?auth={HF}"),
            "--model=sk-learn-logistic-regression-large",
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
    // `\n` followed by the rest of a secret: the escape is kept, the rest
    // masked (in JSON the `n` is the escape's; elsewhere one letter is left).
    assert_eq!(r.mask_written(r#""a\nSecretTail99""#), r#""a\n***""#);
    assert_eq!(r.mask_written(r#""a nSecretTail99""#), r#""a ***""#);
    // An entity is not cut.
    assert_eq!(r.mask_written("x &amp;Secret77 y"), "x &amp;*** y");
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

/// Two secrets that overlap (one's tail is the other's head) are masked as
/// one span: no fragment of either is left.
#[test]
fn overlapping_secrets_leave_no_fragment() {
    let first = "Kd82HsP0aQx-first-77AB";
    let second = "first-77ABcd-second-Zq9";
    let r = Redactor::new([("A_TOKEN", first), ("B_TOKEN", second)], &[]);
    let text = "seen Kd82HsP0aQx-first-77ABcd-second-Zq9 end";
    assert_eq!(r.mask(text), "seen *** end");
    assert_eq!(r.mask_written(text), "seen *** end");
    // Two tokens printed without a space: the second's tail goes too.
    let glued = format!("{HF}{HF}x");
    assert_eq!(Redactor::default().mask(&glued), "***");
    // A suite pattern across a known value.
    let r = Redactor::new([("A_TOKEN", first)], &[r"77AB[a-z]{2}-second".to_string()]);
    assert_eq!(r.mask("Kd82HsP0aQx-first-77ABcd-second tail"), "*** tail");
}

/// A text cut with nothing beyond it in view loses the part of a secret
/// at the cut and the partial word there; one cut with context in view is
/// masked up to the edge.
#[test]
fn a_cut_leaves_no_part_of_a_secret() {
    let secret = "correct horse battery staple 42";
    let r = Redactor::new([("DB_PASSWORD", secret)], &[]);
    assert_eq!(
        r.mask_cut("error: login as correct horse batt", Cut::END),
        "error: login as ***"
    );
    assert_eq!(
        r.mask_cut("rse battery staple 42 was refused", Cut::START),
        "*** was refused"
    );
    // An ordinary partial word at a cut goes too; the text is otherwise kept.
    assert_eq!(r.mask_cut("a long line wi", Cut::END), "a long line ***");
    let text = format!("before {secret} after");
    let cut = text.find("battery").unwrap_or(0);
    assert_eq!(r.mask_range(&text, cut..text.len()), "*** after");
    assert_eq!(r.mask_range(&text, 0..cut), "before ***");
}

/// The suite's own text is not masked by shape where oomgate writes it;
/// a workload printing the same string still is, and secret values always.
#[test]
fn the_suites_own_text_is_not_masked_by_shape() {
    let id = "sk-learn-logistic-regression-large";
    let r = Redactor::new([("A_TOKEN", "Kd82HsP0aQx-7")], &[]).with_suite_text([id, "plain-id"]);
    assert_eq!(r.mask_suite(id), id);
    assert_eq!(
        r.mask_written(&format!("<testcase name=\"{id}\"/>")),
        format!("<testcase name=\"{id}\"/>")
    );
    assert_eq!(r.mask(&format!("printed {id}")), "printed ***");
    assert_eq!(
        r.mask_written("other sk-proj-abcdefghijklmnopqrstuvwxyz"),
        "other ***"
    );
    assert_eq!(r.mask_suite("x-Kd82HsP0aQx-7"), "x-***");
}

/// A secret of `len` characters from a wide alphabet (mixed case and
/// digits, so it is always worth masking).
fn secret_strategy() -> impl proptest::strategy::Strategy<Value = String> {
    "[A-Z][a-z][0-9][A-Za-z0-9+/=_.-]{9,40}"
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

    /// For random secrets and random text with them inserted, overlapping
    /// and repeated, masked whole or cut at random points (with the text
    /// beyond the cut in view, or not), no 8 characters of any secret are
    /// left in anything the masking returns.
    #[test]
    fn no_eight_characters_of_a_secret_survive(
        secrets in proptest::collection::vec(secret_strategy(), 1..4),
        overlap in 1usize..9,
        pieces in proptest::collection::vec(("[ -~\n]{0,30}", 0usize..4), 1..8),
        cut_a in 0usize..2000,
        cut_b in 0usize..2000,
    ) {
        // One more secret whose head is the first one's tail, so the two
        // overlap where the text holds the first followed by the rest of it.
        let first = secrets[0].clone();
        let split = first.len() - overlap.min(first.len() - 1);
        let overlapping = format!("{}Qz7{}", &first[split..], secrets[secrets.len() - 1]);
        let mut secrets = secrets;
        secrets.push(overlapping.clone());
        let names = ["A_TOKEN", "B_TOKEN", "C_TOKEN", "D_TOKEN", "E_TOKEN"];
        let r = Redactor::new(secrets.iter().zip(names).map(|(s, name)| (name, s.as_str())), &[]);
        let mut text = String::new();
        for (filler, which) in &pieces {
            text.push_str(filler);
            match which {
                0 => {}
                // Overlapping: the second one's head is the first one's tail.
                3 => text.push_str(&format!("{first}{}", &overlapping[first.len() - split..])),
                i => text.push_str(&secrets[(i - 1) % secrets.len()]),
            }
        }
        let (a, b) = {
            let a = floor_boundary(&text, cut_a.min(text.len()));
            let b = floor_boundary(&text, cut_b.min(text.len()));
            (a.min(b), a.max(b))
        };
        let outputs = [
            r.mask(&text).into_owned(),
            r.mask_written(&text).into_owned(),
            r.mask_range(&text, a..b),
            r.mask_cut(&text[a..b], Cut { start: a > 0, end: b < text.len() }),
        ];
        for output in &outputs {
            for secret in &secrets {
                for window in secret.as_bytes().windows(8) {
                    let part = std::str::from_utf8(window).unwrap_or_default();
                    proptest::prop_assert!(
                        !output.contains(part),
                        "{part:?} of {secret:?} survives in {output:?} (from {text:?}, cut {a}..{b})"
                    );
                }
            }
        }
    }
}

fn floor_boundary(text: &str, mut index: usize) -> usize {
    while index > 0 && !text.is_char_boundary(index) {
        index -= 1;
    }
    index
}
