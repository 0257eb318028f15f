package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/tools"
)

// toolsCmd runs one of the offline log tools (replay, audit, state, verify,
// dump) on a data directory. The server must be stopped; the tools never
// change the directory, nor take its lock. Exit status: 0 done (verify:
// clean), 1 a problem found (verify: findings; the others: a damaged log or
// archive, read as far as it goes, or nothing to show), 2 bad usage, or no
// data directory (or --retained directory).
func toolsCmd(name string, args []string) int {
	return runTool(name, args, os.Stdout, os.Stderr)
}

// toolUsage is each tool's one-line synopsis.
var toolUsage = map[string]string{
	"replay": "walbus replay [--data DIR] [--entity NAME] [--from SEQ|TIME] [--to SEQ|TIME] [--type TYPES] [--retained DIR] [--format text|json] [--bodies]",
	"audit":  "walbus audit [--data DIR] --entity NAME (--seq N | --message-id ID) [--retained DIR] [--format text|json]",
	"state":  "walbus state [--data DIR] --entity NAME [--at SEQ|TIME] [--max N] [--format text|json]",
	"verify": "walbus verify [--data DIR] [--format text|json]",
	"dump":   "walbus dump [--data DIR] [--entity NAME] [--retained DIR] [--format text|json]",
}

var toolHelp = map[string]string{
	"replay": `Prints every event in log order: the namespace log, then each entity (or
one entity with --entity). SEQ is a log index (of each log), TIME is RFC 3339.
TYPES is a comma-separated list of event types: ` + typeNames() + `.
The deliveries field is the message's count of failed delivery attempts
after the event.

After walbus compact, an entity's records from before its log's start that
are still needed live in its archives: they come first, in index order,
marked source=archive (JSON: "source": "archive"; log records say "log").
The history a compaction dropped is missing, and delivery counts start after
the last gap. --retained DIR adds the history walbus compact --retain DIR
kept (source=retained), so the whole history reads as if never compacted.`,
	"audit": `Prints the whole life of a message: enqueue or schedule, activation, every
lock, renewal, abandon, lock expiry, deferral, dead-lettering, and its end or
where it stands now, with the time between steps. --seq takes any number the
message had; --message-id audits every message that carried the id.

A message older than a compaction shows the steps kept (its records in the
archive, then the log's) and says what was compacted away in between;
--retained DIR reads those steps from the history walbus compact --retain
DIR kept.`,
	"state": `Rebuilds an entity's state as the server would (newest usable snapshot,
then the log) and prints its counts, oldest messages, locks and sessions.
--at shows the state as it stood at a log index or time. A message record
from before the log's start is read from the entity's archives.`,
	"verify": `Checks every log, snapshot and archive: record checksums in every segment,
missing or overlapping segments, event decoding, that events apply, the
state's invariants, that each snapshot equals the replay of the log, that
every archive opens and every record in it reads back, and that each record
the state needs from before the log's start is in an archive. Prints one
finding per line as entity/file/index: problem. Exit status 0 when clean,
1 with findings.`,
	"dump": `Lists each log's segment files (size, index range, records by type), each
entity's snapshots (index, size, raw size, compression ratio) and archives
(records, index range, size, raw size, ratio, records by type). --retained
DIR lists the history files walbus compact --retain DIR kept, too.`,
}

func typeNames() string {
	var names []string
	for _, t := range event.Types() {
		names = append(names, t.String())
	}
	return strings.Join(names, ", ")
}

// toolFlags are the flags the tools share.
type toolFlags struct {
	fs       *flag.FlagSet
	data     string
	entity   string
	format   string
	bodies   bool
	bodyMax  int
	from     string
	to       string
	types    string
	seq      uint64
	msgID    string
	at       string
	max      int
	retained string
}

func newToolFlags(name string, stderr io.Writer) *toolFlags {
	f := &toolFlags{fs: flag.NewFlagSet(name, flag.ContinueOnError)}
	fs := f.fs
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s\n\n%s\n\nFlags:\n", toolUsage[name], toolHelp[name])
		fs.PrintDefaults()
	}
	data := "./data"
	if v, ok := os.LookupEnv("WALBUS_DATA"); ok {
		data = v
	}
	fs.StringVar(&f.data, "data", data, "data directory (also WALBUS_DATA); the server must be stopped")
	fs.StringVar(&f.format, "format", "text", "output format: text or json")
	switch name {
	case "replay", "audit", "dump":
		fs.StringVar(&f.retained, "retained", "", "a directory walbus compact --retain wrote history to: read it too")
	}
	switch name {
	case "replay":
		fs.StringVar(&f.entity, "entity", "", "only this entity's log (default: the namespace log, then every entity)")
		fs.StringVar(&f.from, "from", "", "start at this log index or RFC 3339 time")
		fs.StringVar(&f.to, "to", "", "end at this log index or RFC 3339 time (inclusive)")
		fs.StringVar(&f.types, "type", "", "only these event types, comma-separated")
		fs.BoolVar(&f.bodies, "bodies", false, "include a preview of message bodies (UTF-8 or hex)")
		fs.IntVar(&f.bodyMax, "body-max", tools.DefaultBodyMax, "bytes of each body to preview with --bodies")
	case "audit":
		fs.StringVar(&f.entity, "entity", "", "the entity (required)")
		fs.Uint64Var(&f.seq, "seq", 0, "the message's SequenceNumber")
		fs.StringVar(&f.msgID, "message-id", "", "the message's MessageId (every message that had it)")
	case "state":
		fs.StringVar(&f.entity, "entity", "", "the entity (required)")
		fs.StringVar(&f.at, "at", "", "the state as it stood at this log index or RFC 3339 time (default: the end of the log)")
		fs.IntVar(&f.max, "max", 20, "locks and sessions listed per queue")
	case "dump":
		fs.StringVar(&f.entity, "entity", "", "only this entity (default: the namespace log and every entity)")
	}
	return f
}

// runTool runs tool name with args, writing to stdout and stderr, and
// returns the exit status.
func runTool(name string, args []string, stdout, stderr io.Writer) int {
	if _, ok := toolUsage[name]; !ok {
		fmt.Fprintf(stderr, "walbus: unknown tool %q\n", name)
		return 2
	}
	f := newToolFlags(name, stderr)
	if err := f.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "walbus %s: %s\nUsage: %s\n", name, fmt.Sprintf(format, a...), toolUsage[name])
		return 2
	}
	if f.fs.NArg() > 0 {
		return usageErr("unexpected argument %q", f.fs.Arg(0))
	}
	if f.format != "text" && f.format != "json" {
		return usageErr("unknown format %q (want text or json)", f.format)
	}
	if (name == "audit" || name == "state") && f.entity == "" {
		return usageErr("--entity is required")
	}
	if _, err := os.Stat(f.data); err != nil {
		fmt.Fprintf(stderr, "walbus %s: data directory: %v\n", name, err)
		return 2
	}
	if f.retained != "" {
		if fi, err := os.Stat(f.retained); err != nil || !fi.IsDir() {
			if err == nil {
				err = fmt.Errorf("%s is not a directory", f.retained)
			}
			fmt.Fprintf(stderr, "walbus %s: retained directory: %v\n", name, err)
			return 2
		}
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "walbus %s: %v\n", name, err)
		return 1
	}
	asJSON := f.format == "json"
	switch name {
	case "replay":
		opts := tools.ReplayOptions{Entity: f.entity, JSON: asJSON, Bodies: f.bodies, BodyMax: f.bodyMax, Diag: stderr,
			Retained: f.retained}
		var err error
		if f.from != "" {
			if opts.From, err = tools.ParsePoint(f.from); err != nil {
				return usageErr("--from: %v", err)
			}
		}
		if f.to != "" {
			if opts.To, err = tools.ParsePoint(f.to); err != nil {
				return usageErr("--to: %v", err)
			}
		}
		if f.types != "" {
			for _, s := range strings.Split(f.types, ",") {
				t, ok := event.ParseType(strings.TrimSpace(s))
				if !ok {
					return usageErr("--type: unknown event type %q (types: %s)", s, typeNames())
				}
				opts.Types = append(opts.Types, t)
			}
		}
		if err := tools.Replay(stdout, f.data, opts); err != nil {
			return fail(err)
		}
	case "audit":
		if (f.seq == 0) == (f.msgID == "") {
			return usageErr("give --seq or --message-id (one of them)")
		}
		lives, err := tools.Audit(f.data, f.entity, tools.AuditOptions{Seq: f.seq, MessageID: f.msgID, Retained: f.retained})
		if err != nil {
			return fail(err)
		}
		if asJSON {
			err = writeJSON(stdout, lives)
		} else {
			err = tools.WriteLives(stdout, lives)
		}
		if err != nil {
			return fail(err)
		}
		for _, l := range lives {
			if l.Incomplete {
				fmt.Fprintf(stderr, "walbus audit: the log of %s is damaged: later steps may be missing (see walbus verify)\n", l.Entity)
				return 1
			}
		}
	case "state":
		opts := tools.StateOptions{Max: f.max}
		if f.at != "" {
			var err error
			if opts.At, err = tools.ParsePoint(f.at); err != nil {
				return usageErr("--at: %v", err)
			}
		}
		rep, err := tools.State(f.data, f.entity, opts)
		if err != nil {
			return fail(err)
		}
		if err := writeReport(stdout, asJSON, rep); err != nil {
			return fail(err)
		}
		if rep.Damaged {
			fmt.Fprintf(stderr, "walbus state: the log of %s is damaged: this is the state where it stops being readable (see walbus verify)\n", rep.Entity)
			return 1
		}
	case "verify":
		findings, err := tools.Verify(f.data)
		if err != nil {
			fmt.Fprintf(stderr, "walbus verify: %v\n", err)
			return 2
		}
		for _, fd := range findings {
			if asJSON {
				writeJSON(stdout, fd)
			} else {
				fmt.Fprintln(stdout, fd)
			}
		}
		if len(findings) > 0 {
			fmt.Fprintf(stderr, "walbus verify: %d findings\n", len(findings))
			return 1
		}
		if !asJSON {
			fmt.Fprintln(stdout, "clean")
		}
	case "dump":
		rep, err := tools.Dump(f.data, tools.DumpOptions{Entity: f.entity, Retained: f.retained})
		if err != nil {
			return fail(err)
		}
		if err := writeReport(stdout, asJSON, rep); err != nil {
			return fail(err)
		}
	}
	return 0
}

// writeReport writes a tool's report as JSON or as text for people.
func writeReport(w io.Writer, asJSON bool, rep interface{ WriteText(io.Writer) error }) error {
	if asJSON {
		return writeJSON(w, rep)
	}
	return rep.WriteText(w)
}

func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
