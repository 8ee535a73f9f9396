// Command poolctl drives a cxlpool box over its Redfish API: administrators
// look at the pool, hosts and accounts; a host asks for memory with
// `poolctl request 4GiB` and gives it back with `poolctl release`.
//
//	poolctl [global flags] <command> [args]
//
// Credentials come from a session stored by `poolctl login` (a token file,
// mode 0600, per server under $XDG_CONFIG_HOME/poolctl), or from --user
// with a password read from --password-file, $POOLCTL_PASSWORD, a prompt
// on a terminal, or the first line of standard input. Every command takes
// --json for machine-readable output. Exit status: 0 success, 1 failure,
// 2 usage error.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strings"
	"syscall"
	"time"

	"cxlpool/api/client"
)

// version is the build's version, set with -ldflags "-X main.version=...";
// --version adds the VCS revision Go recorded in the binary.
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(report(err, os.Stderr))
}

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// report prints err (if any) and returns the exit status for it. Under
// --json (a *jsonFailure) the error is one JSON object on stderr.
func report(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	code := exitError
	var ue *usageError
	if errors.As(err, &ue) {
		code = exitUsage
	}
	var jf *jsonFailure
	if errors.As(err, &jf) {
		enc := json.NewEncoder(stderr)
		enc.SetEscapeHTML(false)
		if enc.Encode(errorJSON(jf.err, code)) == nil {
			return code
		}
	}
	fmt.Fprintf(stderr, "poolctl: %v\n", err)
	return code
}

// jsonFailure marks the error of a --json run: report prints it as JSON.
type jsonFailure struct{ err error }

func (e *jsonFailure) Error() string { return e.err.Error() }
func (e *jsonFailure) Unwrap() error { return e.err }

// errorOut is an error under --json: the text poolctl would print, the
// exit status, and for a refusal of the service its HTTP status and the
// messages of its Redfish error (@Message.ExtendedInfo).
type errorOut struct {
	Error struct {
		Message    string            `json:"message"`
		ExitStatus int               `json:"exit_status"`
		Status     int               `json:"http_status,omitempty"`
		Method     string            `json:"method,omitempty"`
		Path       string            `json:"path,omitempty"`
		Messages   []errorMessageOut `json:"messages,omitempty"`
	} `json:"error"`
}

type errorMessageOut struct {
	MessageID  string   `json:"message_id"`
	Message    string   `json:"message"`
	Args       []string `json:"args,omitempty"`
	Severity   string   `json:"severity,omitempty"`
	Resolution string   `json:"resolution,omitempty"`
}

func errorJSON(err error, code int) errorOut {
	var o errorOut
	o.Error.Message, o.Error.ExitStatus = err.Error(), code
	var ce *client.Error
	if errors.As(err, &ce) {
		o.Error.Status, o.Error.Method, o.Error.Path = ce.Status, ce.Method, ce.Path
		msgs := ce.Messages
		if len(msgs) == 0 && (ce.Code != "" || ce.Text != "") {
			msgs = []client.Message{{MessageID: ce.Code, Message: ce.Text}}
		}
		for _, m := range msgs {
			o.Error.Messages = append(o.Error.Messages, errorMessageOut{MessageID: m.MessageID, Message: m.Message,
				Args: m.MessageArgs, Severity: m.MessageSeverity, Resolution: m.Resolution})
		}
	}
	return o
}

// usageError is a mistake on the command line (exit status 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// run is poolctl without the process around it: main passes the real
// arguments, streams and signal context; tests pass their own.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	a := &app{stdout: stdout, stderr: stderr, stdin: os.Stdin, getenv: os.Getenv}
	err := a.run(ctx, args)
	if err != nil && a.g.json {
		return &jsonFailure{err}
	}
	return err
}

// versionText is what --version prints.
func versionText() string {
	s := "poolctl " + version
	if bi, ok := debug.ReadBuildInfo(); ok {
		var rev, dirty string
		for _, kv := range bi.Settings {
			switch kv.Key {
			case "vcs.revision":
				rev = kv.Value
			case "vcs.modified":
				if kv.Value == "true" {
					dirty = "-dirty"
				}
			}
		}
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if rev != "" {
			s += " (" + rev + dirty + ")"
		}
		s += " " + bi.GoVersion
	}
	return s
}

// app is one invocation's state.
type app struct {
	g      globals
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string

	stdinLines *lineReader // stdin read line by line, shared by every password read
}

// globals are the flags every command accepts, before or after it.
type globals struct {
	server       string
	user         string
	passwordFile string
	password     string
	json         bool
	insecure     bool
	ca           string
	timeout      time.Duration
}

const defaultServer = "https://127.0.0.1:8443"

// defaultTimeout bounds commands other than watch unless --timeout says
// otherwise.
const defaultTimeout = 2 * time.Minute

// isGlobal reports whether a flag is one of the global flags.
func isGlobal(name string) bool {
	switch name {
	case "server", "user", "password-file", "password", "json", "insecure", "ca", "timeout":
		return true
	}
	return false
}

// register defines the global flags on fs with their current values as
// defaults, so that a command's flag set can accept them too without
// resetting what the first parse set.
func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.server, "server", g.server, "Redfish service `URL` ($POOLCTL_SERVER)")
	fs.StringVar(&g.user, "user", g.user, "account `name` ($POOLCTL_USER); without it the stored session is used")
	fs.StringVar(&g.passwordFile, "password-file", g.passwordFile, "read the password from the first line of `file`")
	fs.StringVar(&g.password, "password", g.password, "the password (visible to every user in the process list: prefer --password-file or $POOLCTL_PASSWORD)")
	fs.BoolVar(&g.json, "json", g.json, "machine-readable JSON output")
	fs.BoolVar(&g.insecure, "insecure", g.insecure, "do NOT verify the server's TLS certificate (credentials can be intercepted)")
	fs.StringVar(&g.ca, "ca", g.ca, "trust the CA or server certificate in PEM `file`")
	fs.DurationVar(&g.timeout, "timeout", g.timeout, "give up after this long (default 2m; watch: until interrupted)")
}

// command is one subcommand.
type command struct {
	name    string
	args    string // synopsis of the arguments
	summary string
	run     func(ctx context.Context, a *app, args []string) error
}

func commands() []command {
	return []command{
		{"login", "", "open a session and store its token for --server", cmdLogin},
		{"logout", "", "end the stored session", cmdLogout},
		{"passwd", "[--new-password-file FILE]", "change your own password", cmdPasswd},
		{"status", "", "pool capacity (total, reserved, granted, free) and device health", cmdStatus},
		{"hosts", "[HostN]", "attached hosts: head, link, granted capacity, quota; with HostN, that host and its connections", cmdHosts},
		{"quota", "HostN SIZE|none", "set a host's quota: later grants to it must fit (administrators, operators)", cmdQuota},
		{"chunks", "", "reserved chunks and the hosts they are connected to", cmdChunks},
		{"connections", "", "connections (grants of chunks to hosts)", cmdConnections},
		{"request", "SIZE [--host HostN] [--shared] [--name N] [--wait=false]", "reserve SIZE and connect it to a host (yours by default)", cmdRequest},
		{"share", "CHUNK --host HostN", "connect an existing sharable chunk to another host", cmdShare},
		{"release", "CONNECTION | --chunk CHUNK [--free] [--force]", "take capacity back from hosts; --free also frees the chunk; --force even from programs using it", cmdRelease},
		{"resize", "HostN SIZE [--dry-run]", "bring a host to SIZE: grow by one new chunk, shrink by releasing whole chunks", cmdResize},
		{"free", "CHUNK... | --stranded", "return chunks that no host uses to the pool; --stranded: every chunk lost grants left", cmdFree},
		{"watch", "[--count N] [--after EVENT_ID]", "print events as they happen, each with its event id (Ctrl-C stops)", cmdWatch},
		{"accounts", "[list | add NAME --role ROLE [--system HostN] [--temporary] | remove NAME | unlock NAME]", "manage accounts (administrators)", cmdAccounts},
		{"host", "[list | attach SIZE [--name N] [--shared NAME] | detach TAG [--wait] [--force]] [--agent SOCKET]", "on a host: attach pool memory through the local agent (cxlhost) and print how to map it", cmdHost},
		{"fleet", "[boxes | hosts | free | place HOST|BOX/HOST SIZE | events [--from SEQ|--since T] [--follow]] [--nats URLS --creds FILE]", "the fleet of boxes on NATS: records, hosts, free capacity; which box can give a host SIZE; the event stream", cmdFleet},
		{"export", "[list | create CHUNK --client NAME | revoke ID | bench --export ID --token T]", "export chunks to remote racks over the network (administrators, operators); measure an export", cmdExport},
		{"kv", "[list | show NAME | create NAME --hosts HostN,… [--chunk SIZE] [--quota SIZE] | resize NAME QUOTA | join NAME HostN | leave NAME HostN | delete NAME | export NAME --client RACK | unexport NAME]", "KV-cache namespaces in shared pool memory (changes: administrators, operators)", cmdKV},
	}
}

func (a *app) run(ctx context.Context, args []string) error {
	a.g = globals{server: a.getenv("POOLCTL_SERVER"), user: a.getenv("POOLCTL_USER")}
	if a.g.server == "" {
		a.g.server = defaultServer
	}
	fs := flag.NewFlagSet("poolctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	a.g.register(fs)
	showVersion := fs.Bool("version", false, "print poolctl's version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			a.usage(a.stdout, fs)
			return err
		}
		return usagef("%v (see poolctl -h)", err)
	}
	if *showVersion {
		_, err := fmt.Fprintln(a.stdout, versionText())
		return err
	}
	if fs.NArg() == 0 {
		a.usage(a.stderr, fs)
		return usagef("no command given")
	}
	name, rest := fs.Arg(0), fs.Args()[1:]
	if name == "help" {
		if len(rest) == 0 {
			a.usage(a.stdout, fs)
			return nil
		}
		// "poolctl help request" is "poolctl request -h".
		name, rest = rest[0], []string{"-h"}
	}
	for _, c := range commands() {
		if c.name != name {
			continue
		}
		if a.g.timeout < 0 {
			return usagef("--timeout must not be negative")
		}
		err := c.run(ctx, a, rest)
		var hr *helpRequest
		if errors.As(err, &hr) {
			// Help goes to stdout and is a success: the command's
			// forms, then the flags of the one asked about.
			if c.args != "" {
				fmt.Fprintf(a.stdout, "poolctl %s: %s\n  poolctl %s %s\n\n", c.name, c.summary, c.name, c.args)
			}
			hr.fs.SetOutput(a.stdout)
			hr.fs.Usage()
			return nil
		}
		return err
	}
	return usagef("unknown command %q (see poolctl help)", name)
}

// helpRequest is -h or --help given to a command: run prints the
// command's help on stdout and exits 0.
type helpRequest struct{ fs *flag.FlagSet }

func (h *helpRequest) Error() string { return h.fs.Name() + ": help requested" }
func (h *helpRequest) Unwrap() error { return flag.ErrHelp }

// usage prints the overview.
func (a *app) usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "usage: poolctl [global flags] <command> [args]")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
		if c.args != "" {
			fmt.Fprintf(w, "  %-12s   poolctl %s %s\n", "", c.name, c.args)
		}
	}
	fmt.Fprintln(w, "\nglobal flags (also accepted after the command):")
	printFlags(w, fs, func(string) bool { return true })
	fmt.Fprintln(w, "\nexit status: 0 success, 1 failure, 2 usage error")
}

// printFlags lists the flags of fs that keep selects, GNU style.
func printFlags(w io.Writer, fs *flag.FlagSet, keep func(name string) bool) {
	var fl []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if keep(f.Name) {
			fl = append(fl, f)
		}
	})
	sort.Slice(fl, func(i, j int) bool { return fl[i].Name < fl[j].Name })
	for _, f := range fl {
		arg, usage := flag.UnquoteUsage(f)
		if arg != "" {
			arg = " " + arg
		}
		switch {
		case f.Name == "password": // never echoed
		case f.DefValue == "", f.DefValue == "0", f.DefValue == "0s", f.DefValue == "false", f.DefValue == "-1":
		default:
			usage += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "  --%s%s\n    \t%s\n", f.Name, arg, usage)
	}
}

// flags makes a command's flag set; the global flags are accepted there
// too. Call parse with it.
func (a *app) flags(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet("poolctl "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	// The flag package calls Usage on every parse error too: it writes
	// to the flag set's output, which is io.Discard until a help request
	// (helpRequest) points it at stdout.
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: poolctl [global flags] %s %s\n", name, synopsis)
		printFlags(w, fs, func(name string) bool { return !isGlobal(name) })
		fmt.Fprintln(w, "global flags: see poolctl -h")
	}
	a.g.register(fs)
	return fs
}

// parse parses a command's arguments, letting flags and positional
// arguments come in any order ("request 4GiB --host Host2"); "--" ends
// the flags. It checks the number of positional arguments.
func parse(fs *flag.FlagSet, args []string, minPos, maxPos int) ([]string, error) {
	var pos []string
	for {
		// The flag package prints the command's usage itself for -h
		// and for a bad flag.
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, &helpRequest{fs}
			}
			return nil, usagef("%s: %v", fs.Name(), err)
		}
		rest := fs.Args()
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	switch {
	case len(pos) < minPos:
		return nil, usagef("%s: missing argument (see %s -h)", fs.Name(), fs.Name())
	case maxPos >= 0 && len(pos) > maxPos:
		return nil, usagef("%s: unexpected argument %q", fs.Name(), strings.Join(pos[maxPos:], " "))
	}
	return pos, nil
}

// deadline applies --timeout (or the default) to a command's context.
func (a *app) deadline(ctx context.Context, unlimited bool) (context.Context, context.CancelFunc) {
	d := a.g.timeout
	if d == 0 && !unlimited {
		d = defaultTimeout
	}
	if d == 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}
