package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/walbus/walbus/tools/compaction"
)

// compactCmd runs walbus compact: offline compaction of a stopped broker's
// data directory. Exit status 0 done, 1 failed, 2 bad usage.
func compactCmd(args []string) int { return runCompact(args, os.Stdout, os.Stderr) }

func runCompact(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("compact", flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := "./data"
	if v, ok := os.LookupEnv("WALBUS_DATA"); ok {
		data = v
	}
	fs.StringVar(&data, "data", data, "data directory (also WALBUS_DATA); the server must be stopped")
	entity := fs.String("entity", "", "compact only this entity (default: all)")
	retain := fs.String("retain", "", "write the history compaction drops to archives in this directory, for walbus replay --retained")
	format := fs.String("format", "text", "output format: text or json")
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: walbus compact [--data DIR] [--entity NAME] [--retain DIR] [--format text|json]

Reclaims the disk held by settled messages that old live messages (deferred,
scheduled, dead-lettered, or just waiting) pin at the front of a log: the
records still needed move into a compressed archive keyed by SequenceNumber,
and the log's front is truncated. Every live message keeps its
SequenceNumber. The server must be stopped. Safe to kill at any moment: the
directory is then as before or as after, and running it again finishes.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 || (*format != "text" && *format != "json") {
		fmt.Fprintln(stderr, "walbus compact: unexpected argument or format; see walbus compact --help")
		return 2
	}
	reports, err := compaction.Compact(data, compaction.Options{Entity: *entity, Retain: *retain})
	if *format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(reports)
	} else if len(reports) > 0 {
		writeCompactReport(stdout, reports)
	}
	if err != nil {
		fmt.Fprintln(stderr, "walbus compact:", err)
		return 1
	}
	return 0
}

func writeCompactReport(w io.Writer, reports []compaction.Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "entity\tbytes before\tbytes after\tsaved\tarchived\tdropped\t")
	var before, after int64
	for _, r := range reports {
		before, after = before+r.BytesBefore, after+r.BytesAfter
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%d\t\n", r.Entity, r.BytesBefore, r.BytesAfter, saved(r.BytesBefore, r.BytesAfter), r.Archived, r.Dropped)
	}
	if len(reports) > 1 {
		fmt.Fprintf(tw, "total\t%d\t%d\t%s\t\t\t\n", before, after, saved(before, after))
	}
	tw.Flush()
	for _, r := range reports {
		if r.Note != "" {
			fmt.Fprintf(w, "%s: %s\n", r.Entity, r.Note)
		}
		if r.Retained != "" {
			fmt.Fprintf(w, "%s: dropped history retained in %s\n", r.Entity, r.Retained)
		}
	}
}

func saved(before, after int64) string {
	if before == 0 {
		return "0%"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(before-after)/float64(before))
}
