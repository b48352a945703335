//! A case's `server`: `{port}` left as written until a launch picks the
//! port, then filled in one pass (a value's own braces stay), the launched
//! server and load client, and each mistake a server can make.
//!
//! The case's own `command` keeps `{port}` unfilled, which looks like a
//! bug: the port is chosen per launch, so only `client_at` and `server_at`
//! fill it, and this test checks both sides of that.

use super::*;

#[test]
fn a_server_is_checked_and_its_port_filled_in_at_launch() {
    let suite = parse_ok(
        "[suite]\nname = \"s\"\n[[case]]\nname = \"serve-{model}\"\nmatrix = { model = [\"a\"], cfg = ['{\"a\":{\"b\":1}}'] }\ncommand = [\"load\", \"--url=http://127.0.0.1:{port}/v1\", \"--json={cfg}\"]\nenv = { URL = \"127.0.0.1:{port}\" }\nclient_budget = { host = \"1 GiB\" }\nserver = { command = [\"serve\", \"{model}\", \"--port\", \"{port}\"], ready = \"http://127.0.0.1:{port}/health\", env = { MODEL = \"{model}\" }, stop_signal = \"INT\", kill_grace = \"10s\" }\n",
    );
    let case = &suite.cases[0];
    let server = case.server.as_ref().expect("a server");
    assert_eq!(
        server.command,
        ["serve", "a", "--port", "{port}"],
        "shown with {{port}}"
    );
    assert_eq!(server.stop_signal.name, "SIGINT");
    assert_eq!(server.kill_grace, Duration::from_secs(10));
    assert_eq!(server.ready_timeout, Duration::from_secs(300));
    assert_eq!(
        case.client_budget.host,
        Some(crate::units::Bytes::from_mib(1024))
    );
    assert_eq!(case.command[1], "--url=http://127.0.0.1:{port}/v1");
    let client = case.client_at(41234);
    assert_eq!(
        client.command,
        [
            "load",
            "--url=http://127.0.0.1:41234/v1",
            "--json={\"a\":{\"b\":1}}"
        ],
        "one pass: a value's own braces stay"
    );
    assert_eq!(client.env["URL"], "127.0.0.1:41234");
    let launched = case.server_at(41234).expect("a server");
    assert_eq!(launched.command, ["serve", "a", "--port", "41234"]);
    assert_eq!(launched.env["MODEL"], "a");
    assert_eq!(launched.env["URL"], "127.0.0.1:41234", "the case's env too");
    assert_eq!(
        server.ready.fill(&case.params_at(41234)).describe(),
        "http://127.0.0.1:41234/health"
    );

    for (source, expected) in [
        (
            "name = \"t\"\ncommand = [\"x\", \"{port}\"]",
            "this case has no `server`",
        ),
        (
            "name = \"t\"\ncommand = [\"x\"]\nclient_budget = { host = \"1 GiB\" }",
            "`client_budget` without `server`",
        ),
        (
            "name = \"t-{port}\"\ncommand = [\"x\"]\nmatrix = { port = [1] }\nserver = { command = [\"s\"], ready = \"tcp://127.0.0.1:{port}\" }",
            "`port` is reserved",
        ),
        (
            "name = \"t-{port}\"\ncommand = [\"x\"]\nserver = { command = [\"s\"], ready = \"tcp://127.0.0.1:{port}\" }",
            "`{port}` changes from launch to launch",
        ),
        (
            "name = \"t\"\ncommand = [\"x\"]\nserver = { command = [\"s\"], ready = \"https://127.0.0.1:{port}/\" }",
            "https is not supported",
        ),
        (
            "name = \"t\"\ncommand = [\"x\"]\nserver = { command = [\"s\"], ready = \"tcp://127.0.0.1\" }",
            "needs a port",
        ),
        (
            "name = \"t\"\ncommand = [\"x\"]\nserver = { command = [\"s\"], ready = { log = \"(\" } }",
            "not a usable regex",
        ),
        (
            "name = \"t\"\ncommand = [\"x\"]\nserver = { command = [\"s\"], ready = \"http://h:{nope}/\" }",
            "placeholder `{nope}` in `server.ready`",
        ),
        (
            "name = \"t\"\ncommand = [\"x\"]\nserver = { command = [\"s\"], ready = { log = \"up\" }, stop_signal = \"SIGSTOP\" }",
            "not a signal a server can be stopped with",
        ),
        (
            "name = \"t\"\ncommand = [\"x\"]\ntimeout = \"1m\"\nserver = { command = [\"s\"], ready = { log = \"up\" }, ready_timeout = \"5m\" }",
            "must be shorter than the case's `timeout`",
        ),
        (
            "name = \"t\"\ncommand = [\"x\"]\nserver = { command = [\"s\"], ready = { log = \"up\" }, env = { OOMGATE_PORT = \"1\" } }",
            "set by oomgate for the server",
        ),
        (
            "name = \"t\"\ncommand = [\"x\"]\nserver = { command = [], ready = { log = \"up\" } }",
            "`server.command` is empty",
        ),
        (
            "name = \"t\"\ncommand = [\"x\"]\nserver = { command = [\"s\"] }",
            "missing key `ready`",
        ),
        (
            "name = \"t\"\ncommand = [\"x\"]\nserver = { command = [\"s\"], ready = { log = \"up\" }, stop_signal = \"KILL\" }",
            "`kill_grace = \"0s\"` sends it at once",
        ),
        (
            "name = \"t-{p}\"\nmatrix = { p = [\"8000\", \"abc\"] }\ncommand = [\"x\"]\nserver = { command = [\"s\"], ready = \"http://127.0.0.1:{p}/h\" }",
            "in case `t-abc`, `server.ready`: `abc` is not a port",
        ),
        (
            "name = \"t-{s}\"\nmatrix = { s = [\"\"] }\ncommand = [\"x\"]\nserver = { command = [\"{s}\"], ready = { log = \"up\" } }",
            "the server's program is empty after substitution",
        ),
    ] {
        let (message, _) = parse_err(&format!("[suite]\nname = \"s\"\n[[case]]\n{source}\n"));
        assert!(message.contains(expected), "{source}:\n{message}");
    }

    // A log readiness may wait for the line naming the port.
    let suite = parse_ok(
        "[suite]\nname = \"s\"\n[[case]]\nname = \"t\"\ncommand = [\"x\"]\nserver = { command = [\"s\"], ready = { log = \"listening on :{port}$\" } }\n",
    );
    let case = &suite.cases[0];
    let ready = case
        .server
        .as_ref()
        .map(|s| s.ready.fill(&case.params_at(7)));
    assert_eq!(ready, Some(Ready::Log("listening on :7$".into())));

    // Without a server, `port` is a matrix key like any other.
    let suite = parse_ok(
        "[suite]\nname = \"s\"\n[[case]]\nname = \"t-{port}\"\nmatrix = { port = [\"8000\"] }\ncommand = [\"x\", \"{port}\"]\n",
    );
    assert_eq!(suite.cases[0].command, ["x", "8000"]);
    // The default readiness time never outlasts the case.
    let suite = parse_ok(
        "[suite]\nname = \"s\"\n[[case]]\nname = \"t\"\ncommand = [\"x\"]\ntimeout = \"1m\"\nserver = { command = [\"s\"], ready = { log = \"up\" } }\n",
    );
    assert_eq!(
        suite.cases[0].server.as_ref().map(|s| s.ready_timeout),
        Some(Duration::from_secs(60))
    );

    // A search may vary the server, and each probe shows its value.
    let suite = parse_ok(
        "[suite]\nname = \"s\"\n[[case]]\nname = \"t\"\ncommand = [\"load\", \"{port}\"]\nserver = { command = [\"serve\", \"--max-seqs={seqs}\", \"{port}\"], ready = { log = \"ready\" } }\nsearch = { param = \"seqs\", max = 64 }\n",
    );
    let probe = suite.cases[0].probe(16);
    assert_eq!(
        probe.server.as_ref().map(|s| s.command.clone()),
        Some(vec![
            "serve".into(),
            "--max-seqs=16".into(),
            "{port}".into()
        ])
    );
    assert_eq!(
        probe.server_at(7).map(|s| s.command),
        Some(vec!["serve".into(), "--max-seqs=16".into(), "7".into()])
    );
}
