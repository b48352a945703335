use super::*;
use mask::{FRAGMENT, masks_fragments};

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

/// A token shape is found wherever it starts: after an encoded separator,
/// an `_`, a digit or letters, in a file name; glued to a word, it must
/// look random.
#[test]
fn tokens_are_found_wherever_they_start() {
    let ghp = "ghp_0123456789abcdefghijABCDEFGHIJ0123";
    let sk = "sk-AbCdEfGhIjKlMnOpQrStUvWxYz0123";
    let hf = "hf_Qw3Er5Ty7Ui9Op1As3Df5Gh7Jk9Lz1Xc3";
    let r = Redactor::default();
    let cases = [
        (
            format!("https://x/?a%3D{ghp}&b=1"),
            "https://x/?a%3D***&b=1".to_string(),
        ),
        (
            format!(r#"{{\u0022{hf}\u0022}}"#),
            r#"{\u0022***\u0022}"#.to_string(),
        ),
        (format!("x_{sk} y"), "x_*** y".to_string()),
        (format!("9{ghp}"), "9***".to_string()),
        (format!("abc{hf}"), "abc***".to_string()),
        (HF.to_string(), "***".to_string()),
        (
            format!("  File \"/work/model_{hf}.py\", line 12, in load"),
            "  File \"/work/model_***.py\", line 12, in load".to_string(),
        ),
        (
            format!("model_{hf}.py:12 load"),
            "model_***.py:12 load".to_string(),
        ),
        // An identifier in mixed case glued to `hf_` looks random enough.
        (
            "load_hf_PretrainedModelForLM()".to_string(),
            "load_***()".to_string(),
        ),
        // After an encoded separator, as after the separator itself.
        (
            "u=%3Dsk-learn-logistic-regression-large".to_string(),
            "u=%3D***".to_string(),
        ),
        // Credentials by syntax, at the end of a longer name or glued.
        (
            "DB_PASSWORD=hunter22x".to_string(),
            "DB_PASSWORD=***".to_string(),
        ),
        (
            "x-api-key: Zq9XmB27LpQw4".to_string(),
            "x-api-key: ***".to_string(),
        ),
        (
            "x_https://user:pa55word@example.com/".to_string(),
            "x_https://user:***@example.com/".to_string(),
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(r.mask(&text), expected, "{text}");
        assert_eq!(r.mask_written(&text), expected, "{text}");
    }
    // In the files as written: JSON and XML.
    let json =
        serde_json::to_string(&serde_json::json!({ "site": format!("model_{hf}.py:12 load") }))
            .unwrap_or_default();
    assert!(!r.mask_written(&json).contains("Qw3Er5"), "{json}");
    let xml = format!("<failure message=\"x&quot;{hf}&quot;\">abc{hf}</failure>");
    assert_eq!(
        r.mask_written(&xml),
        "<failure message=\"x&quot;***&quot;\">abc***</failure>"
    );
}

/// Ordinary words, case ids and paths with a token's prefix inside a word
/// stay as they are; none of them is a token.
#[test]
fn ordinary_words_case_ids_and_paths_stay_unmasked() {
    let r = Redactor::new(
        [
            ("HF_TOKEN", "hf_Qw3Er5Ty7Ui9Op1As3Df5Gh7Jk9Lz1Xc3"),
            ("HF_TOKEN_PATH", "/home/ci/.cache/huggingface/token"),
        ],
        &[],
    );
    for text in [
        "flask-server-load-test-batch-64",
        "task-memory-leak-detector-run-7",
        "task-memory-leak",
        "disk-cache-warm-start-large-model",
        "disk-cache-warm",
        "risk-sk-model-evaluation",
        "ask-Server-Load-Test-Batch-Size-64",
        "bench_hf_bert_base_uncased_finetune",
        "graphf_transformer_layers_24",
        "cases/flask-server-load-test-batch-64/stdout.log",
        "/home/ci/models/bert",
        "/home/ci/.cache/huggingface/hub/models--bert-base-uncased",
        "/home/ci/.cache/other",
        "torch/nn/modules/module.py:1747 _call_impl",
        "load_hf_dataset_from_hub_cache_v2",
        "max_new_tokens=256 tokens/s=1834.2",
        "ASIAN_PACIFIC_REGION_SERVERS",
    ] {
        assert_eq!(r.mask(text), text, "{text}");
        assert_eq!(r.mask_written(text), text, "{text}");
    }
}

const TOKEN: &str = "hf_Qw3Er5Ty7Ui9Op1As3Df5Gh7Jk9Lz1Xc3";

/// Whether any `FRAGMENT` characters of `secret` are in `text` (but
/// digits alone, which are masked only within the whole value: a figure
/// holds them as often as a secret).
fn fragment_in(secret: &str, text: &str) -> Option<String> {
    let chars: Vec<char> = secret.chars().collect();
    chars
        .windows(FRAGMENT)
        .map(|w| w.iter().collect::<String>())
        .filter(|part| !part.bytes().all(|b| b.is_ascii_digit()))
        .find(|part| text.contains(part.as_str()))
}

/// A figure that holds eight digits of a secret (a ratio of the host
/// peak, `0.0345679012345679`, and a token ending `0123456789`) is left
/// whole: masked, results.json would be no JSON. The token itself is
/// masked, and so is a piece of it with a letter in.
#[test]
fn digits_of_a_secret_inside_a_figure_are_left_whole() {
    let token = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789";
    let r = Redactor::new([("HF_TOKEN", token)], &[]);
    let json = r#"{"delta_ratio": -0.0345679012345679, "bytes": 10123456789}"#;
    assert_eq!(r.mask_written(json), json);
    assert_eq!(r.mask(json), json);
    assert_eq!(r.mask(&format!("token {token}")), "token ***");
    assert_eq!(r.mask("…Yz012345 cut"), "…*** cut");
}

/// What pytest leaves of a long repr (`'hf_Qw3Er5Ty7...5Gh7Jk9Lz1Xc3'`, 12
/// and 13 of its 36 characters) and a line wrapped at 20 columns (three
/// pieces that add up to the whole) are masked: no part of the token is
/// left, the rest of the text is.
#[test]
fn no_piece_of_a_known_secret_survives_a_middle_cut_or_a_wrap() {
    let r = Redactor::new([("HF_TOKEN", TOKEN)], &[]);
    let assertion = "E       assert 'hf_Qw3Er5Ty7...5Gh7Jk9Lz1Xc3' == 'x'";
    assert_eq!(r.mask(assertion), "E       assert '***...***' == 'x'");
    assert_eq!(
        r.mask_written(assertion),
        "E       assert '***...***' == 'x'"
    );

    let line = format!("HF_TOKEN={TOKEN} is set");
    let wrapped: Vec<String> = line
        .as_bytes()
        .chunks(20)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    assert_eq!(
        wrapped,
        [
            "HF_TOKEN=hf_Qw3Er5Ty",
            "7Ui9Op1As3Df5Gh7Jk9L",
            "z1Xc3 is set"
        ]
    );
    for (sep, expected) in [
        ("\n", "HF_TOKEN=***\n***\n*** is set"),
        ("\r\n", "HF_TOKEN=***\r\n***\r\n*** is set"),
        ("\\n", "HF_TOKEN=***\\n***\\n*** is set"),
    ] {
        let text = wrapped.join(sep);
        assert_eq!(r.mask(&text), expected, "{text:?}");
        assert_eq!(r.mask_written(&text), expected, "{text:?}");
    }
    // Wrapped at 6 columns: every piece is shorter than a fragment, but
    // each follows one across a line break.
    let narrow: Vec<String> = format!("x {TOKEN}")
        .as_bytes()
        .chunks(12)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    let masked = r.mask(&narrow.join("\n")).into_owned();
    assert_eq!(fragment_in(TOKEN, &masked), None, "{masked}");
    for piece in &narrow[1..] {
        assert!(!masked.contains(piece.as_str()), "{piece} in {masked:?}");
    }
    // Its head before a line break is masked when the next line goes on
    // with it.
    assert_eq!(
        r.mask("token hf_Qw\n3Er5Ty7Ui9Op1As3Df5Gh7Jk9Lz1Xc3 ok"),
        "token ***\n*** ok"
    );
    // A few characters that only happen to follow are kept.
    assert_eq!(r.mask("5Gh7Jk9Lz1X\nXcode"), "***\nXcode");
}

/// A secret that is a path, or a sentence, is masked whole, never by
/// its pieces: masking those would mask every path sharing 8 characters.
#[test]
fn pieces_of_a_path_or_a_sentence_are_kept() {
    let path = "/home/CI/Cache2024/huggingface/token";
    let sentence = "Correct Horse Battery Staple 42";
    let r = Redactor::new([("HF_TOKEN_PATH", path), ("DB_PASSWORD", sentence)], &[]);
    assert_eq!(r.mask(&format!("read {path}")), "read ***");
    assert_eq!(r.mask(&format!("pw {sentence}.")), "pw ***.");
    for text in [
        "/home/CI/Cache2024/other",
        "Horse Battery",
        "huggingface/token",
    ] {
        assert_eq!(r.mask(text), text);
    }
}

/// A secret whose pieces repeat (its 8-grams occur many times in it) and
/// text made of its pieces across line breaks still take linear time.
#[test]
fn masking_fragments_is_linear() {
    let secret = "AbAbAbAbAbAbAbAbAbAbAbAbAbAbAbAb9";
    let r = Redactor::new([("A_TOKEN", secret), ("B_TOKEN", TOKEN)], &[]);
    let mut text = String::new();
    while text.len() < 4_000_000 {
        text.push_str("AbAbAbAbAbAb\nAbAbAbAb\nAb\nhf_Qw3Er5\nTy7Ui9Op1\n");
    }
    let start = std::time::Instant::now();
    let masked = r.mask(&text);
    assert!(masked.len() <= text.len());
    assert!(start.elapsed() < std::time::Duration::from_secs(60));
}

/// A secret that looks random: mixed case and digits, 16 to 48 characters,
/// a few symbols of a token's alphabet.
fn random_secret() -> impl proptest::strategy::Strategy<Value = String> {
    "[A-Z][a-z][0-9][A-Za-z0-9]{13,40}[_.-]?[A-Za-z0-9]{0,5}"
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

    /// For random secrets and random text with random pieces of them (8
    /// characters or more) embedded, beside each other, across line breaks
    /// or alone, no 8 characters of a secret survive any of the masks.
    #[test]
    fn no_eight_character_substring_of_a_secret_survives(
        secret in random_secret(),
        other in random_secret(),
        pieces in proptest::collection::vec(("[ -~\n]{0,20}", 0usize..64, 8usize..64), 1..10),
        cut_a in 0usize..2000,
        cut_b in 0usize..2000,
    ) {
        proptest::prop_assume!(masks_fragments(&secret) && masks_fragments(&other));
        let r = Redactor::new([("A_TOKEN", secret.as_str()), ("B_PASSWORD", other.as_str())], &[]);
        let mut text = String::new();
        for (i, (filler, start, len)) in pieces.iter().enumerate() {
            text.push_str(filler);
            let from = if i % 2 == 0 { &secret } else { &other };
            let start = start % (from.len() - 7);
            let end = (start + len).min(from.len());
            text.push_str(&from[start..end.max(start + 8)]);
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
            for s in [&secret, &other] {
                proptest::prop_assert!(
                    fragment_in(s, output).is_none(),
                    "{:?} of {s:?} survives in {output:?} (from {text:?})",
                    fragment_in(s, output)
                );
            }
        }
    }

    /// Masking pieces of a secret inside a JSON document keeps it JSON.
    #[test]
    fn masked_json_with_pieces_stays_json(
        secret in random_secret(),
        text in "[ -~\n\\\\\"]{0,60}",
        start in 0usize..64,
    ) {
        proptest::prop_assume!(masks_fragments(&secret));
        let r = Redactor::new([("A_TOKEN", secret.as_str())], &[]);
        let start = start % (secret.len() - 7);
        let piece = &secret[start..];
        let json = serde_json::to_string(&serde_json::json!({
            "t": format!("{text}{piece}\n{text}\\{piece}"),
        }))
        .unwrap_or_default();
        let masked = r.mask_written(&json);
        proptest::prop_assert!(serde_json::from_str::<serde_json::Value>(&masked).is_ok(), "{masked}");
        proptest::prop_assert!(fragment_in(&secret, &masked).is_none(), "{masked}");
    }
}

/// How fast masking goes over about 100 MB of log lines, in 64 KiB texts
/// (a log tail's size), with three secrets registered: plain lines, and
/// lines full of words that hold a token's prefix (`flask-server-…`),
/// which must be found to be told from tokens. Run it on a release build:
/// `cargo test --release --lib -- --ignored --nocapture masking_throughput`.
#[test]
#[ignore = "a measurement, not a check"]
fn masking_throughput() {
    let r = Redactor::new(
        [
            ("HF_TOKEN", TOKEN),
            ("WANDB_API_KEY", "0123abcd4567ef89aB12cd34EF56ab78cd90ef12"),
            ("DB_PASSWORD", "correct horse battery staple"),
        ],
        &[],
    );
    let plain: &[&str] = &[
        "step",
        "loss=0.4312",
        "lr=3e-4",
        "epoch",
        "done",
        "tokens/s=1834.2",
        "gpu0",
        "INFO",
        "train.py:88",
        "batch",
        "64",
        "warmup",
    ];
    let prefixed: &[&str] = &[
        "step",
        "loss=0.4312",
        "lr=3e-4",
        "task-memory-leak",
        "flask-server-load-test-batch-64",
        "disk-cache-warm",
        "/home/ci/models/bert",
        "epoch",
        "→",
        "done",
        "tokens/s=1834.2",
        "gpu0",
        "hf_hub",
        "INFO",
        "model_hf_loader.py:88",
    ];
    for (name, words) in [("plain", plain), ("prefixed", prefixed)] {
        let mut chunk = String::new();
        let mut i = 0usize;
        while chunk.len() < 64 * 1024 {
            for k in 0..12 {
                chunk.push_str(words[(i * 7 + k * 3) % words.len()]);
                chunk.push(' ');
            }
            chunk.push_str(&format!("{i}\n"));
            i += 1;
        }
        let chunks = 100 * 1024 * 1024 / chunk.len();
        let start = std::time::Instant::now();
        let mut kept = 0;
        for _ in 0..chunks {
            kept += r.mask(&chunk).len();
        }
        let seconds = start.elapsed().as_secs_f64();
        let mb = (chunks * chunk.len()) as f64 / 1e6;
        println!(
            "{name}: {mb:.0} MB in {seconds:.3} s, {:.0} MB/s ({kept})",
            mb / seconds
        );
    }
}
