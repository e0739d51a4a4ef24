use super::*;

fn check(input: &str, expected: &str, count: usize) {
    let redacted = redact(input);
    assert_eq!(redacted.text, expected, "{input:?}");
    assert_eq!(redacted.count, count, "{input:?}");
    assert_eq!(
        redacted.by_kind.iter().map(|(_, n)| n).sum::<usize>(),
        count,
        "{input:?}"
    );
    // A second pass finds nothing.
    assert_eq!(redact(&redacted.text).count, 0, "{expected:?}");
}

fn unchanged(input: &str) {
    check(input, input, 0);
}

/// A base64 line of a key, `width` characters.
fn b64(width: usize) -> String {
    "MIIEowIBAAKCAQEAx9Zt0Q+/abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
        .chars()
        .cycle()
        .take(width)
        .collect()
}

fn whole_key(label: &str, lines: usize) -> String {
    let mut key = format!("-----BEGIN {label}-----\n");
    for _ in 0..lines {
        key.push_str(&b64(64));
        key.push('\n');
    }
    key.push_str(&b64(20));
    key.push_str(&format!("\n-----END {label}-----"));
    key
}

#[test]
fn each_token_pattern() {
    check(
        "key sk-ant-api03-abcdefghijklmnopqrstuv end",
        "key [REDACTED:anthropic_key] end",
        1,
    );
    check(
        "OPENAI sk-proj-abcdefghijklmnopqrstuvwx",
        "OPENAI [REDACTED:openai_key]",
        1,
    );
    for prefix in ["ghp", "gho", "ghu", "ghs", "ghr"] {
        check(
            &format!("{prefix}_abcdefghijklmnopqrstuvwxyz0123456789"),
            "[REDACTED:github_token]",
            1,
        );
    }
    check(
        "github_pat_11ABCDEFG0123456789_abcdefghijkl",
        "[REDACTED:github_token]",
        1,
    );
    check("xoxb-1234567890-abcdef", "[REDACTED:slack_token]", 1);
    check("xoxs-1234567890-abcdef", "[REDACTED:slack_token]", 1);
    check(
        "STRIPE=sk_live_4eC39HqLyjWDarjtT1zdp7dc.",
        "STRIPE=[REDACTED:stripe_key].",
        1,
    );
    check(
        "rk_test_4eC39HqLyjWDarjtT1zdp7dc",
        "[REDACTED:stripe_key]",
        1,
    );
    check(
        "token glpat-xxxxxxxxxxxxxxxxxxxx1234 here",
        "token [REDACTED:gitlab_token] here",
        1,
    );
    check(
        "hf_abcdefghijklmnopqrstuvwxyzABCDEF1234",
        "[REDACTED:huggingface_token]",
        1,
    );
    check(
        "access ya29.a0AfH6SMBx-abcdefghijklmnopqrstuv end",
        "access [REDACTED:google_oauth_token] end",
        1,
    );
    check(
        "aws AKIAIOSFODNN7EXAMPLE.",
        "aws [REDACTED:aws_access_key].",
        1,
    );
    check(
        "temporary ASIAY34FZKBOKMUTVV7A,",
        "temporary [REDACTED:aws_access_key],",
        1,
    );
    check(
        "maps key=AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q&x",
        "maps key=[REDACTED:google_api_key]&x",
        1,
    );
    check(
        "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "Bearer [REDACTED:jwt]",
        1,
    );
}

#[test]
fn authorization_headers() {
    check(
        "Authorization: Bearer ya29.a0AfH6SMBx3Kq9_zZ-token~value+/==\nnext",
        "Authorization: Bearer [REDACTED:bearer_token]\nnext",
        1,
    );
    check(
        "curl -H 'authorization: bearer 0123456789abcdef0123' url",
        "curl -H 'authorization: bearer [REDACTED:bearer_token]' url",
        1,
    );
    check(
        r#"{"Authorization": "Basic dXNlcjpodW50ZXIy"}"#,
        r#"{"Authorization": "Basic [REDACTED:basic_auth]"}"#,
        1,
    );
    check(
        "Proxy-Authorization: Basic YWxhZGRpbjpvcGVuc2VzYW1l",
        "Proxy-Authorization: Basic [REDACTED:basic_auth]",
        1,
    );
    check(
        "Authorization: Bearer sk-proj-abcdefghijklmnopqrstuvwx",
        "Authorization: Bearer [REDACTED:openai_key]",
        1,
    );
}

#[test]
fn assignments_keep_the_name_and_quotes() {
    check(
        "password = hunter2hunter2hunter2",
        "password = [REDACTED:secret]",
        1,
    );
    check(
        "API_KEY: 0123456789abcdef0123",
        "API_KEY: [REDACTED:secret]",
        1,
    );
    check(
        r#"{"password": "hunter2", "user": "ann"}"#,
        r#"{"password": "[REDACTED:secret]", "user": "ann"}"#,
        1,
    );
    for name in [
        "api_key",
        "apiKey",
        "secret",
        "token",
        "access_token",
        "client_secret",
        "refresh_token",
        "SessionToken",
    ] {
        check(
            &format!(r#"{{"{name}":"v4lue-of-it"}}"#),
            &format!(r#"{{"{name}":"[REDACTED:secret]"}}"#),
            1,
        );
    }
    check(
        r#"{\"password\": \"hunter22\"}"#,
        r#"{\"password\": \"[REDACTED:secret]\"}"#,
        1,
    );
    check(
        "db_password='s3cr3t pass'",
        "db_password='[REDACTED:secret]'",
        1,
    );
    check(
        r#""token": "a\"b\\c d""#,
        r#""token": "[REDACTED:secret]""#,
        1,
    );
    check(
        "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\nAWS_REGION=eu-west-1",
        "AWS_SECRET_ACCESS_KEY=[REDACTED:secret]\nAWS_REGION=eu-west-1",
        1,
    );
    check(
        "[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n",
        "[default]\naws_access_key_id = [REDACTED:aws_access_key]\naws_secret_access_key = [REDACTED:secret]\n",
        2,
    );
    check(
        r#"export AWS_SECRET_ACCESS_KEY="wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY""#,
        r#"export AWS_SECRET_ACCESS_KEY="[REDACTED:secret]""#,
        1,
    );
    check(
        r#""SecretAccessKey": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY","#,
        r#""SecretAccessKey": "[REDACTED:secret]","#,
        1,
    );
    check(
        "'password' => 'hunter22'",
        "'password' => '[REDACTED:secret]'",
        1,
    );
    check(
        "the token=abcdef1234567890. Next",
        "the token=[REDACTED:secret]. Next",
        1,
    );
    check(
        "url?token=a1b2c3d4e5f6&page=2",
        "url?token=[REDACTED:secret]&page=2",
        1,
    );
}

#[test]
fn url_passwords_keep_the_user_and_host() {
    check(
        "git clone https://deploy:S3cr3tPassw0rd99@git.example.com/repo.git now",
        "git clone https://deploy:[REDACTED:url_password]@git.example.com/repo.git now",
        1,
    );
    check(
        "DATABASE_URL=postgres://app:pgS3cretValue77@db:5432/app",
        "DATABASE_URL=postgres://app:[REDACTED:url_password]@db:5432/app",
        1,
    );
    check(
        "AccountName=x;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IF/K1==;EndpointSuffix=core",
        "AccountName=x;AccountKey=[REDACTED:secret];EndpointSuffix=core",
        1,
    );
    for text in [
        "postgres://app:$PGPASSWORD@db/app",
        "https://user:{password}@host/",
        "https://user:password@host/",
        "see https://example.com:8080/path and ssh://git@host:22",
        "mailto:someone@example.com",
    ] {
        check(text, text, 0);
    }
}

#[test]
fn leaves_ordinary_text_and_code_alone() {
    for text in [
        "tokens: 1234",
        "token = short",
        "token = None",
        "password: str",
        "api_key: Option<String>",
        "token: self.token.clone()",
        "secret::SecretString::new(x)",
        "if token == other_token_value {",
        r#"{"password": ""}"#,
        r#"{"token": null, "max_tokens": 4096, "token": 123456789012}"#,
        r#"{"token_type": "Bearer"}"#,
        "password: $DB_PASSWORD",
        "password: ${DB_PASSWORD}",
        "use sk-learn for this",
        "the password is stored in the vault",
        "AKIA is a prefix",
        "ASIA and AIza are prefixes",
        "Bearer tokens are short-lived",
        "headers = {'Authorization': f'Bearer {token}'}",
        "Authorization: Bearer $ACCESS_TOKEN",
        "Basic authentication_is_fine_here",
        "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA\n-----END PUBLIC KEY-----",
        "[REDACTED:secret] and password: [REDACTED:secret]",
    ] {
        unchanged(text);
    }
}

#[test]
fn whole_private_keys() {
    for label in [
        "RSA PRIVATE KEY",
        "PRIVATE KEY",
        "EC PRIVATE KEY",
        "ENCRYPTED PRIVATE KEY",
        "OPENSSH PRIVATE KEY",
    ] {
        check(
            &format!("a\n{}\nb", whole_key(label, 3)),
            "a\n[REDACTED:private_key]\nb",
            1,
        );
    }
    // Armor headers, a blank line and a checksum: PGP.
    let pgp = format!(
        "-----BEGIN PGP PRIVATE KEY BLOCK-----\nVersion: GnuPG v2\nComment: test\n\n{}\n{}\n=Ab12\n-----END PGP PRIVATE KEY BLOCK-----",
        b64(64),
        b64(20)
    );
    check(
        &format!("gpg says:\n{pgp}\ndone"),
        "gpg says:\n[REDACTED:private_key]\ndone",
        1,
    );
    // PEM encryption headers.
    let encrypted = format!(
        "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,3F17F5316E2BAC89\n\n{}\n-----END RSA PRIVATE KEY-----",
        b64(64)
    );
    check(&encrypted, "[REDACTED:private_key]", 1);
    // Indented in YAML, JSON-escaped, and flattened onto one line.
    check(
        &format!(
            "key: |\n  -----BEGIN PRIVATE KEY-----\n  {}\n  -----END PRIVATE KEY-----\nnext: 1",
            b64(64)
        ),
        "key: |\n  [REDACTED:private_key]\nnext: 1",
        1,
    );
    check(
        &format!(
            r#"{{"private_key": "-----BEGIN PRIVATE KEY-----\n{}\n{}\n-----END PRIVATE KEY-----\n", "x": 1}}"#,
            b64(64),
            b64(9)
        ),
        r#"{"private_key": "[REDACTED:private_key]\n", "x": 1}"#,
        1,
    );
    check(
        &format!(
            "key -----BEGIN PRIVATE KEY----- {} {} -----END PRIVATE KEY----- ok",
            b64(64),
            b64(12)
        ),
        "key [REDACTED:private_key] ok",
        1,
    );
}

#[test]
fn cut_private_keys_end_at_their_last_base64_line() {
    // Cut after a whole line, mid-line, and right after BEGIN.
    check(
        &format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n{}\nnext line of prose",
            b64(64),
            b64(30)
        ),
        "[REDACTED:private_key]\nnext line of prose",
        1,
    );
    check(
        "-----BEGIN PRIVATE KEY-----\nMIIEowIBAAKCAQEAx9Zt0Q\nDone\n",
        "[REDACTED:private_key]\nDone\n",
        1,
    );
    check(
        "see -----BEGIN RSA PRIVATE KEY----- blocks are cut",
        "see [REDACTED:private_key] blocks are cut",
        1,
    );
    // A capsule's unresolved error, cut in the middle: the key runs on
    // across the omission marker to its END line.
    check(
        &format!(
            "$ cat id_rsa\n-----BEGIN RSA PRIVATE KEY-----\n{}\n{}\n[… 1,234 characters omitted …]\n{}\n{}\n-----END RSA PRIVATE KEY-----\nexit 1",
            b64(64),
            b64(11),
            b64(40),
            b64(64)
        ),
        "$ cat id_rsa\n[REDACTED:private_key]\nexit 1",
        1,
    );
    // Cut before its BEGIN line: the lines above END.
    check(
        &format!(
            "tail:\n{}\n{}\n{}\n-----END OPENSSH PRIVATE KEY-----\nok",
            b64(17),
            b64(64),
            b64(8)
        ),
        "tail:\n[REDACTED:private_key]\nok",
        1,
    );
    // A line SOBA cut mid-way, with `…` or the inline marker.
    check(
        &format!(
            "Goal:\n-----BEGIN RSA PRIVATE KEY-----\n{}\nMIIEowIBAAKC… (the full text is under Original task)",
            b64(64)
        ),
        "Goal:\n[REDACTED:private_key]… (the full text is under Original task)",
        1,
    );
    check(
        &format!(
            "x\n-----BEGIN RSA PRIVATE KEY-----\n{} [… 40 characters omitted …] rest",
            b64(30)
        ),
        "x\n[REDACTED:private_key] [… 40 characters omitted …] rest",
        1,
    );
    check(
        &format!(
            "see [… 40 characters omitted …] abcdEFGH0123\n{}\n{}\n-----END PRIVATE KEY-----",
            b64(64),
            b64(5)
        ),
        "see [… 40 characters omitted …] [REDACTED:private_key]",
        1,
    );
    // The omission marker ends a key cut on both sides, and is kept.
    check(
        &format!(
            "-----BEGIN EC PRIVATE KEY-----\n{}\n[… 99 characters omitted …]\nerror: permission denied",
            b64(64)
        ),
        "[REDACTED:private_key]\n[… 99 characters omitted …]\nerror: permission denied",
        1,
    );
}

/// Cut blocks whose lines are not equally wide: every base64 line after
/// BEGIN is key material, short first and last lines too, up to the first
/// line that is prose or structure.
#[test]
fn cut_keys_of_any_line_width_end_before_the_first_prose_line() {
    // Short lines, then a line that is no base64 (an original task cut).
    check(
        "Task start -----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIcut2ec\nAwEHoUQDQgAE\nTASK-TAIL-KEPT",
        "Task start [REDACTED:private_key]\nTASK-TAIL-KEPT",
        1,
    );
    // PGP: a blank line after BEGIN, a short body and its checksum.
    check(
        "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBGcutpgp6\n=abcd\n\n## Done\nKEEP",
        "[REDACTED:private_key]\n\n## Done\nKEEP",
        1,
    );
    // Narrower, then wider lines (a key pasted from two sources), then
    // prose on a line of its own.
    let mut input =
        String::from("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAcut1\nQmFzZTY0Y3V0\n");
    for _ in 0..50 {
        input.push_str("QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo=\n");
    }
    input.push_str("HUGE-AFTER\n");
    check(&input, "[REDACTED:private_key]\nHUGE-AFTER\n", 1);
    // A blank line ends a begun body; prose after it survives.
    check(
        &format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n{}\n\nThanks\n",
            b64(64),
            b64(10)
        ),
        "[REDACTED:private_key]\n\nThanks\n",
        1,
    );
    // After a whole key line, any short base64 is the last line; after a
    // narrower one, a lone word is prose.
    check(
        &format!("-----BEGIN PRIVATE KEY-----\n{}\nabc\n- x", b64(64)),
        "[REDACTED:private_key]\n- x",
        1,
    );
    check(
        "-----BEGIN PRIVATE KEY-----\nMHcCAQEEIcut2ec\nok\n",
        "[REDACTED:private_key]\nok\n",
        1,
    );
    // The capsule's 250 + 250 cut of an error: the marker and blank lines
    // around it are inside, the tail lines too, up to the prose.
    check(
        &format!(
            "-----BEGIN RSA PRIVATE KEY-----\n{}\n\n[… 3,000 characters omitted …]\n\n{}\n{}\nerror: bad key",
            b64(64),
            b64(33),
            b64(64)
        ),
        "[REDACTED:private_key]\nerror: bad key",
        1,
    );
    // A line cut by `…` after a short one; never a fence, a heading or
    // front matter.
    check(
        "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIcut2ec\nAwEHoUQ…",
        "[REDACTED:private_key]…",
        1,
    );
    for structure in ["```", "## Goal", "---", "~~~"] {
        check(
            &format!("-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIcut2ec\n{structure}\nx"),
            &format!("[REDACTED:private_key]\n{structure}\nx"),
            1,
        );
    }
}

/// Class 1 of issue 13: a cut key and a later whole one are two spans; what
/// lies between them survives byte for byte.
#[test]
fn a_cut_key_never_reaches_a_later_key() {
    let between =
        "\n```\n\n### `cargo test`\n```\nerror: x\n```\n\n## Done\n- ok\n## Next steps\nx\n";
    let input = format!(
        "```\n-----BEGIN RSA PRIVATE KEY-----\n{}\n{}{between}{}\n",
        b64(64),
        b64(22),
        whole_key("RSA PRIVATE KEY", 2)
    );
    let expected = format!("```\n[REDACTED:private_key]{between}[REDACTED:private_key]\n");
    check(&input, &expected, 2);
    // Two cut keys, one after the other.
    let input = format!(
        "-----BEGIN PRIVATE KEY-----\n{}\n-----BEGIN PRIVATE KEY-----\n{}\n## Goal",
        b64(64),
        b64(64)
    );
    check(
        &input,
        "[REDACTED:private_key]\n[REDACTED:private_key]\n## Goal",
        2,
    );
    // An END line far away behind prose is not this key's.
    let input = format!(
        "-----BEGIN PRIVATE KEY-----\n{}\n\nsome prose here\n{}\n-----END PRIVATE KEY-----",
        b64(64),
        b64(64)
    );
    check(
        &input,
        "[REDACTED:private_key]\n\nsome prose here\n[REDACTED:private_key]",
        2,
    );
}

#[test]
fn overlapping_candidates_merge_and_count_once() {
    let redacted =
        redact("api_key=sk-abcdefghijklmnopqrstuvwx and ghp_abcdefghijklmnopqrstuvwxyz01");
    assert_eq!(
        redacted.text,
        "api_key=[REDACTED:openai_key] and [REDACTED:github_token]"
    );
    assert_eq!(redacted.count, 2);
    assert_eq!(
        redacted.by_kind,
        vec![("openai_key", 1), ("github_token", 1)]
    );
    // The quoted value is longer than the key inside it: one span.
    check(
        r#"token: "sk-ant-api03-abcdefghijklmnopqrstuv extra""#,
        r#"token: "[REDACTED:secret]""#,
        1,
    );
}

#[test]
fn hostile_shapes_do_not_panic() {
    for text in [
        "",
        "-----BEGIN PRIVATE KEY-----",
        "-----END PRIVATE KEY-----",
        "-----END PRIVATE KEY----------BEGIN PRIVATE KEY-----",
        "\\n-----END PRIVATE KEY-----",
        "é\\n\\nabc\\r\\n-----END PRIVATE KEY-----",
        "password=\\",
        "-----BEGIN PRIVATE KEY-----\\",
        "-----BEGIN PRIVATE KEY-----\r\n\r\n",
    ] {
        let redacted = redact(text);
        assert_eq!(redact(&redacted.text).count, 0, "{text:?}");
    }
}
