//! Every command of `opex-connector`: its words, arguments, options and examples. The help,
//! the completions, the man page and the book's page are written from these rows.

/// One command.
#[derive(Debug)]
pub struct Command {
    /// The words that name it: `validate`, `read modbus`.
    pub name: &'static str,
    /// Its positional arguments in order: `FILE` required, `[BOARD]` optional, `NODE_ID...`
    /// one or more.
    pub args: &'static [&'static str],
    /// What it does, in one line of at most 50 characters (the overview's column).
    pub summary: &'static str,
    /// What it does, in full; paragraphs are separated by a blank line.
    pub about: &'static str,
    /// Its options, in groups (the OPC-UA security options are one group shared by `browse`
    /// and `read opcua`).
    pub options: &'static [&'static [Opt]],
    /// What its exit status says.
    pub exit: &'static str,
    /// Examples: a command line and what it does.
    pub examples: &'static [(&'static str, &'static str)],
}

/// One option: `--name VALUE` or a bare `--switch`.
#[derive(Debug)]
pub struct Opt {
    /// `--name`.
    pub long: &'static str,
    /// A one-letter alias, `-c`.
    pub short: Option<&'static str>,
    /// The name of its value (`FILE`, `N`); `None` for a switch.
    pub value: Option<&'static str>,
    /// Whether the command needs it.
    pub required: bool,
    /// What it does.
    pub help: &'static str,
}

impl Command {
    /// Its options, every group in order.
    pub fn all_options(&self) -> impl Iterator<Item = &'static Opt> {
        self.options.iter().flat_map(|group| group.iter())
    }
}

const fn valued(long: &'static str, value: &'static str, help: &'static str) -> Opt {
    Opt {
        long,
        short: None,
        value: Some(value),
        required: false,
        help,
    }
}

const fn switch(long: &'static str, help: &'static str) -> Opt {
    Opt {
        long,
        short: None,
        value: None,
        required: false,
        help,
    }
}

const fn required(long: &'static str, value: &'static str, help: &'static str) -> Opt {
    Opt {
        long,
        short: None,
        value: Some(value),
        required: true,
        help,
    }
}

/// The exit status of the commissioning tools.
const TOOL_EXIT: &str = "0 done; 1 no connection or a security failure (one line on stderr says why and what to check); 2 wrong arguments; 3 the device refused some reads, or a limit cut the walk or the scan";

/// The exit status of a command that only checks or prints.
const CHECK_EXIT: &str = "0 done; 1 it failed (stderr says why); 2 wrong arguments";

/// `--count` and `--interval-ms` of the `read` tools.
const REPEAT: [Opt; 2] = [
    valued("--count", "N", "read N times (default 1), to watch a value"),
    valued(
        "--interval-ms",
        "MS",
        "milliseconds between two reads with --count (default 1000)",
    ),
];

/// An OPC-UA device's security keys, as flags.
const SECURITY: [Opt; 8] = [
    valued(
        "--security-policy",
        "POLICY",
        "None (default) or Basic256Sha256, as a device's security_policy",
    ),
    valued(
        "--security-mode",
        "MODE",
        "Sign or SignAndEncrypt (the default with a policy), as security_mode",
    ),
    valued(
        "--username",
        "NAME",
        "the user of the session (anonymous without it); needs --password-file",
    ),
    valued(
        "--password-file",
        "FILE",
        "a file holding the user's password (never on the command line)",
    ),
    valued(
        "--pki-dir",
        "DIR",
        "the client certificate and the trusted/ and rejected/ server certificates (the daemon's is <data_dir>/opcua-pki)",
    ),
    switch(
        "--trust-server-certs",
        "trust a server certificate seen for the first time, as trust_server_certs: true",
    ),
    switch(
        "--no-check-hostname",
        "accept a server certificate that names another host, as check_server_hostname: false",
    ),
    valued(
        "--timeout-ms",
        "MS",
        "how long one request may take (default 5000)",
    ),
];

/// The Modbus device and point keys `read modbus` and `scan modbus` share.
const MODBUS_DEVICE: [Opt; 2] = [
    valued(
        "--unit",
        "U",
        "the unit id (slave address), 0 to 247; default 1",
    ),
    valued(
        "--timeout-ms",
        "MS",
        "how long one request may take (default 1000)",
    ),
];

/// Every command, in the order `--help` lists them.
pub const COMMANDS: &[Command] = &[
    Command {
        name: "run",
        args: &[],
        summary: "run the daemon with a config file",
        about: "Runs the connector with FILE: the pollers, the sources, the flows, the sinks and the HTTP server. It logs to stderr (filter with RUST_LOG, e.g. RUST_LOG=debug; the release binaries of scripts/build-release.sh carry no debug or trace lines, so there RUST_LOG=debug shows info and above). Once the HTTP server is bound it prints `opex-connector listening on http://ADDR/` to stdout, which tells the real port when `listen` uses port 0. SIGTERM or SIGINT stops it gracefully: batches are flushed and every store committed (exit 0).\n\nWithout any command, `opex-connector` runs the demo config it carries (config/demo.yaml: data in ./data, HTTP on 127.0.0.1:8080).",
        options: &[&[Opt {
            long: "--config",
            short: Some("-c"),
            value: Some("FILE"),
            required: true,
            help: "the config file (YAML)",
        }]],
        exit: "0 stopped by SIGTERM or SIGINT; 1 the config has problems (each on stderr with its path), or a part could not start; 2 wrong arguments",
        examples: &[
            ("opex-connector run --config /etc/opex-connector/config.yaml", "run a site's config"),
            ("opex-connector", "run the demo against the built-in simulated plant"),
        ],
    },
    Command {
        name: "reload",
        args: &[],
        summary: "apply a changed config to the running daemon",
        about: "Asks the daemon that runs FILE to apply it while it runs, over its config API (`POST /api/config` on FILE's own `connector.http.listen`, loopback when it listens on every address, with FILE's `connector.http.admin_token`). FILE is validated first: when it has problems, each is printed with its path and nothing is sent. The daemon changes only the parts that changed and keeps FILE as its next revision; prints `applied: revision N` and the parts started, stopped or restarted, or, on stderr, why nothing changed (every problem with its path, the parts this version cannot change while it runs, or `If-Match`'s conflict). Without an admin token, or with `listen` on port 0, send the daemon SIGHUP instead (`systemctl reload opex-connector`).",
        options: &[&[
            Opt {
                long: "--config",
                short: Some("-c"),
                value: Some("FILE"),
                required: true,
                help: "the config file the daemon runs (YAML)",
            },
            switch("--drain", "a sink FILE removes (or gives another kind) that still holds rows delivers them first, out of the routes (`?drain=1`)"),
            switch("--discard", "such a sink's rows are given up, counted `discarded` and alerted (`?discard=1`); not with --drain"),
        ]],
        exit: "0 applied; 1 not applied: the file has problems, the daemon did not answer, or it refused the config (stderr says why); 2 wrong arguments",
        examples: &[(
            "opex-connector reload --config /etc/opex-connector/config.yaml",
            "apply an edited config without a restart",
        ), (
            "opex-connector reload --config /etc/opex-connector/config.yaml --drain",
            "apply one that removes a sink still holding rows: they are delivered first",
        )],
    },
    Command {
        name: "validate",
        args: &["FILE"],
        summary: "check a config; print every problem with its path",
        about: "Checks FILE without starting anything: prints `FILE: ok` and exits 0, or prints every problem as `path: message` on stderr and exits 1. Warnings (`warning: path: message`, e.g. an unwired flow port) do not change the exit status. Unknown keys are errors; one close to a valid key names it. The systemd unit runs it before every start.",
        options: &[],
        exit: "0 no errors (warnings may be printed); 1 problems, each on stderr with its path; 2 wrong arguments",
        examples: &[
            ("opex-connector validate site.yaml", "check a config before installing it"),
        ],
    },
    Command {
        name: "demo-config",
        args: &[],
        summary: "print the demo config the binary carries",
        about: "Prints config/demo.yaml as built into the binary, so a box with only the binary can start a site's config from it.",
        options: &[],
        exit: CHECK_EXIT,
        examples: &[("opex-connector demo-config > site.yaml", "start a site's config from the demo")],
    },
    Command {
        name: "schema",
        args: &[],
        summary: "print the JSON Schema of the config file",
        about: "Prints the JSON Schema (2020-12) of the config file, written from the config's own types: every key with its type, its documentation, its default and its allowed values, and unknown keys refused. Editors that read a `# yaml-language-server: $schema=...` line complete and check a config with it.",
        options: &[],
        exit: CHECK_EXIT,
        examples: &[(
            "opex-connector schema > opex-connector.schema.json",
            "save the schema for an editor",
        )],
    },
    Command {
        name: "overlay",
        args: &["FILE", "[BOARD]"],
        summary: "print a config with templates or overlay applied",
        about: "With FILE alone, prints FILE with its device templates expanded, as the pollers see it; exit 1 with every problem when it is not valid. With BOARD, prints the site config FILE with the board profile's config overlay (boards/*/) merged over it.",
        options: &[],
        exit: "0 printed; 1 a file cannot be read or the config has problems (each on stderr with its path); 2 wrong arguments",
        examples: &[
            ("opex-connector overlay site.yaml", "see the devices the templates make"),
            (
                "opex-connector overlay site.yaml boards/raspberry-pi-4/overlay.yaml",
                "the site config as it runs on a board",
            ),
        ],
    },
    Command {
        name: "simulate",
        args: &[],
        summary: "serve a simulated plant (Modbus, OPC-UA, S7)",
        about: "Serves the simulated plant (an oven, a boiler, a pump, a line counter) that the demo polls, until SIGINT or SIGTERM: over Modbus TCP, over OPC-UA, and as a Siemens S7 CPU (S7comm over ISO-on-TCP, any rack and slot, the plant in DB1). An address of `off` leaves that protocol out; a build without the `simulator` feature has no OPC-UA.",
        options: &[&[
            valued("--modbus", "ADDR", "the Modbus TCP address (default 127.0.0.1:5020), or off"),
            valued("--opcua", "ADDR", "the OPC-UA address (default 127.0.0.1:4840), or off"),
            valued("--s7", "ADDR", "the S7 CPU's address (default 127.0.0.1:1102), or off"),
        ]],
        exit: "0 stopped by SIGTERM or SIGINT; 1 an address cannot be bound; 2 wrong arguments",
        examples: &[
            ("opex-connector simulate", "every protocol on its default address"),
            ("opex-connector simulate --modbus 0.0.0.0:5020 --opcua off", "Modbus only, on every interface"),
        ],
    },
    Command {
        name: "browse",
        args: &["ENDPOINT"],
        summary: "walk an OPC-UA server's address space",
        about: "Walks the address space of the OPC-UA server at ENDPOINT (opc.tcp://HOST:PORT/) from the Objects folder, or --from NODE, and prints the tree: browse name, node id, class, and for each variable its data type, what this user may do and its value. The walk is bounded by --depth and --max-nodes; a `cut:` line says when either stopped it. With --yaml it prints the variables as a `nodes:` list for a device entry instead.\n\nIt only browses and reads; it never writes to a device.",
        exit: TOOL_EXIT,
        options: &[
            &[
                valued("--from", "NODE", "the node the walk starts from (default the Objects folder, i=85)"),
                valued("--depth", "N", "how deep the walk goes, 0 to 32 (default 6)"),
                valued("--max-nodes", "N", "the most nodes listed, up to 100000 (default 2000)"),
                valued("--match", "GLOB", "keep the variables whose browse name or node id matches (*, ?, any case)"),
                valued("--yaml", "GROUP", "print a nodes: list in poll group GROUP instead of the tree"),
            ],
            &SECURITY,
        ],
        examples: &[
            ("opex-connector browse opc.tcp://127.0.0.1:4840/", "the tree of the simulated plant"),
            (
                "opex-connector browse opc.tcp://10.0.0.5:4840/ --from \"ns=2;s=Plant\" --match \"*boiler*\" --yaml process",
                "a nodes: list to paste into a device entry",
            ),
        ],
    },
    Command {
        name: "read modbus",
        args: &["TARGET"],
        summary: "read one Modbus point as a config would",
        about: "Reads one point of the Modbus device at TARGET, through the pollers' own code, and prints the time, what was read, the value and its quality, or the exception and what it means. TARGET is tcp://HOST:PORT, or rtu:///dev/ttyX?baud=19200&parity=even&data_bits=8&stop_bits=1 (the line keys of a modbus_rtu device). The options are the keys of a device entry and its point, checked by the same code as `validate`.\n\nIt only reads (function codes 1 to 4); it never writes to a device.",
        options: &[
            &[
                required("--register", "N", "the point's address, 0 to 65535"),
                valued("--kind", "KIND", "holding (default), input, coil or discrete"),
                valued("--table", "KIND", "the same as --kind"),
                valued("--type", "TYPE", "u16 (default), i16, u32, i32, f32, u64, i64, f64, bool, string, as a point's type"),
                valued("--length", "N", "registers of a string"),
                valued("--word-order", "ORDER", "big (default) or little, for types of more than one register"),
                valued("--byte-order", "ORDER", "big (default) or little, within each register"),
                valued("--scale", "S", "multiply the value by S, as a point's scale"),
                valued("--offset", "O", "then add O, as a point's offset"),
            ],
            &MODBUS_DEVICE,
            &REPEAT,
        ],
        exit: TOOL_EXIT,
        examples: &[
            ("opex-connector read modbus tcp://127.0.0.1:5020 --unit 1 --register 0 --type f32", "a float in holding registers 0-1"),
            (
                "opex-connector read modbus tcp://127.0.0.1:5020 --register 7 --type i16 --scale 0.1 --count 3 --interval-ms 1000",
                "watch a scaled register three times, a second apart",
            ),
            ("opex-connector read modbus 'rtu:///dev/ttyUSB0?baud=19200&parity=even' --unit 3 --register 100", "a register over a serial line"),
        ],
    },
    Command {
        name: "read opcua",
        args: &["ENDPOINT", "NODE_ID..."],
        summary: "read OPC-UA nodes as a config would",
        about: "Reads the nodes NODE_ID... (at most 1000) of the OPC-UA server at ENDPOINT (opc.tcp://HOST:PORT/) and prints each value with its quality, or the status and what it means. A secure server takes the device's security keys as options.\n\nIt only reads; it never writes to a device.",
        options: &[&REPEAT, &SECURITY],
        exit: TOOL_EXIT,
        examples: &[
            ("opex-connector read opcua opc.tcp://127.0.0.1:4840/ \"ns=2;s=Plant.Boiler.Pressure\"", "one node of the simulated plant"),
            (
                "opex-connector read opcua opc.tcp://10.0.0.5:4840/ \"ns=3;i=1001\" --security-policy Basic256Sha256 --username op --password-file pw.txt --pki-dir /var/lib/opex-connector/opcua-pki",
                "a node of a secure server, with the daemon's certificate",
            ),
        ],
    },
    Command {
        name: "read s7",
        args: &["URL", "ADDRESS..."],
        summary: "read Siemens S7 items as a config would",
        about: "Reads the items ADDRESS... (DB1.DBW0, M10.1, ...) of the Siemens S7 PLC at URL (s7://HOST:PORT?rack=0&slot=1) with the driver's own connection, planner and decoder, and prints each value with its quality, or the item's status and what it means.\n\nOnly ISO connect, setup communication and ReadVar go out; it never writes to a PLC.",
        options: &[
            &[
                valued("--type", "TYPE", "the type read (default: the address's width as unsigned, a bit as bool)"),
                valued("--length", "N", "characters of a string"),
                valued("--timeout-ms", "MS", "how long one request may take (default 1000)"),
            ],
            &REPEAT,
        ],
        exit: TOOL_EXIT,
        examples: &[(
            "opex-connector read s7 's7://10.0.0.7:102?rack=0&slot=1' DB1.DBD0 --type real",
            "a REAL in data block 1",
        )],
    },
    Command {
        name: "scan modbus",
        args: &["TARGET"],
        summary: "list the address ranges a Modbus device has",
        about: "Reads a table of the Modbus device at TARGET (as for `read modbus`) block by block and prints the address ranges it answers. Ctrl-C stops it with what it found so far; progress goes to stderr when it is a terminal.\n\nIt only reads; it never writes to a device.",
        options: &[
            &[
                valued("--table", "KIND", "holding (default), input, coil or discrete"),
                valued("--kind", "KIND", "the same as --table"),
                valued("--range", "FIRST-LAST", "the addresses tried (default 0-9999)"),
                valued("--block", "N", "addresses asked for in one request"),
                valued("--max-requests", "N", "the most requests sent"),
            ],
            &MODBUS_DEVICE,
        ],
        exit: TOOL_EXIT,
        examples: &[(
            "opex-connector scan modbus tcp://127.0.0.1:5020 --unit 1 --range 0-199",
            "which holding registers 0 to 199 exist",
        )],
    },
    Command {
        name: "hash-password",
        args: &[],
        summary: "hash a password for opcua_server.users",
        about: "Reads a password from standard input (one line; the newline is not part of it) and prints its Argon2id hash on one line: the password_hash of a user of the OPC-UA server (opcua_server.users). The password itself never goes in the config.",
        options: &[],
        exit: CHECK_EXIT,
        examples: &[(
            "opex-connector hash-password < password.txt",
            "the hash to put in opcua_server.users[].password_hash",
        )],
    },
    Command {
        name: "keygen",
        args: &["DIR"],
        summary: "make a release signing key pair (release tooling)",
        about: "Makes a new ed25519 key pair in DIR: release.key (mode 0600) signs manifests, release.pub goes on the boxes to check them.",
        options: &[],
        exit: CHECK_EXIT,
        examples: &[("opex-connector keygen ~/release-keys", "a key pair for signing releases")],
    },
    Command {
        name: "sign-config",
        args: &["KEY", "FILE"],
        summary: "sign a config for a fleet's key-value bucket",
        about: "Prints the value to put in a fleet's bucket under `config.<id>` for the config in FILE, signed with KEY (a key pair's private half, as keygen writes it): one line of JSON, `{\"config\":\"<FILE's text>\",\"key\":\"<the public key, hex>\",\"signature\":\"<base64 ed25519 over FILE's bytes>\"}`. A gateway takes it only when the public key is among its `fleet.trusted_keys`. FILE is validated first: when it has problems, each is printed with its path and nothing is signed.",
        options: &[],
        exit: CHECK_EXIT,
        examples: &[(
            "opex-connector sign-config keys/release.key line-3.yaml",
            "the value to put under config.line-3 (nats kv put)",
        )],
    },
    Command {
        name: "sign-manifest",
        args: &["ARTIFACT", "KEY", "OUT"],
        summary: "sign a release manifest (release tooling)",
        about: "Writes ARTIFACT's release manifest (version, target, sha256, not_after) to OUT and its ed25519 signature, made with KEY, to OUT.sig. One of --valid-for and --not-after is needed.",
        options: &[&[
            required("--version", "V", "the version the artifact is"),
            required("--target", "TRIPLE", "the target triple it runs on"),
            valued("--valid-for", "DURATION", "how long a box may install it from now (90d)"),
            valued("--not-after", "RFC3339", "the time after which no box installs it"),
        ]],
        exit: CHECK_EXIT,
        examples: &[(
            "opex-connector sign-manifest dist/opex-connector-0.1.0-aarch64-unknown-linux-musl release.key dist/opex-connector-0.1.0-aarch64-unknown-linux-musl.manifest.json --version 0.1.0 --target aarch64-unknown-linux-musl --valid-for 90d",
            "sign a field build",
        )],
    },
    Command {
        name: "verify-manifest",
        args: &["MANIFEST", "ARTIFACT", "PUBKEY"],
        summary: "check a release manifest and its artifact",
        about: "Checks MANIFEST's signature with PUBKEY, that it is for this target, not expired, newer than the running version, and that ARTIFACT matches its sha256. Prints `version=`, `target=`, `sha256=` and `not_after=` lines.",
        options: &[&[
            required("--target", "TRIPLE", "this board's target triple"),
            valued("--sig", "SIG", "the signature file (default MANIFEST.sig)"),
            valued("--running", "VERSION", "the version the box runs (default this binary's)"),
            switch("--allow-downgrade", "accept a version older than the running one"),
        ]],
        exit: "0 the artifact may be installed; 1 refused, with every reason; 2 wrong arguments",
        examples: &[(
            "opex-connector verify-manifest new.manifest.json new release.pub --target aarch64-unknown-linux-musl",
            "check an update before installing it",
        )],
    },
    Command {
        name: "check-status",
        args: &["VERSION"],
        summary: "check a status document on stdin (after an update)",
        about: "Reads a GET /api/status document on stdin; succeeds when connector.healthy is true and connector.version is VERSION.",
        options: &[],
        exit: "0 healthy and running VERSION; 1 not, with the reasons; 2 wrong arguments",
        examples: &[(
            "curl -s http://127.0.0.1:8080/api/status | opex-connector check-status 0.1.0",
            "is the box healthy on the new version?",
        )],
    },
    Command {
        name: "completions",
        args: &["SHELL"],
        summary: "print shell completions: bash, zsh or fish",
        about: "Prints the completion script of SHELL (bash, zsh or fish) for opex-connector's commands and options.",
        options: &[],
        exit: CHECK_EXIT,
        examples: &[
            (
                "opex-connector completions bash > /etc/bash_completion.d/opex-connector",
                "bash, for every user",
            ),
            (
                "opex-connector completions zsh > \"${fpath[1]}/_opex-connector\"",
                "zsh",
            ),
            (
                "opex-connector completions fish > ~/.config/fish/completions/opex-connector.fish",
                "fish",
            ),
        ],
    },
    Command {
        name: "version",
        args: &[],
        summary: "print the version (also --version, -V)",
        about: "Prints `opex-connector VERSION`, and `previous VERSION` after an over-the-air update.",
        options: &[],
        exit: "0",
        examples: &[("opex-connector --version", "which version this box runs")],
    },
    Command {
        name: "help",
        args: &["[COMMAND...]"],
        summary: "print the help of a command (also --help, -h)",
        about: "Prints the list of commands, or the help of COMMAND: what it does, its arguments, options, exit status and examples. `opex-connector COMMAND --help` prints the same.",
        options: &[],
        exit: "0; 2 no such command",
        examples: &[("opex-connector help read modbus", "the options of read modbus")],
    },
];
