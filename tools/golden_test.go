package tools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/walbus/walbus/log/event"
)

// TestGolden runs the tools on the golden scenario (buildGolden) and
// compares their output with testdata/golden. Rewrite the expectations
// with: go test ./tools -run TestGolden -rewrite
//
// data=compacted runs a command on the compacted scenario instead
// (compactedFixture) after both compactions, data=compacted-mid after the
// first; retained adds the history they retained.
func TestGolden(t *testing.T) {
	datadriven.RunTest(t, "testdata/golden", func(t *testing.T, td *datadriven.TestData) string {
		data, retained := goldenDir(t), ""
		if a, ok := td.Arg("data"); ok {
			cs := compactedFixture(t)
			switch a.Vals[0] {
			case "compacted":
				data, retained = cs.data, cs.retained
			case "compacted-mid":
				data, retained = cs.mid, cs.midRet
			default:
				t.Fatalf("unknown data %q", a.Vals[0])
			}
		}
		if !td.HasArg("retained") {
			retained = ""
		}
		out, err := runGolden(data, retained, td)
		if err != nil {
			out += "error: " + err.Error() + "\n"
		}
		return out
	})
}

func runGolden(data, retained string, td *datadriven.TestData) (string, error) {
	arg := func(key string) string {
		if a, ok := td.Arg(key); ok {
			return strings.Join(a.Vals, ",")
		}
		return ""
	}
	point := func(key string) (Point, error) {
		if s := arg(key); s != "" {
			return ParsePoint(s)
		}
		return Point{}, nil
	}
	var out, diag bytes.Buffer
	asJSON := td.HasArg("json")
	switch td.Cmd {
	case "replay":
		opts := ReplayOptions{Entity: arg("entity"), JSON: asJSON, Bodies: td.HasArg("bodies"), Diag: &diag, Retained: retained}
		var err error
		if opts.From, err = point("from"); err != nil {
			return "", err
		}
		if opts.To, err = point("to"); err != nil {
			return "", err
		}
		if s := arg("type"); s != "" {
			for _, name := range strings.Split(s, ",") {
				typ, ok := event.ParseType(name)
				if !ok {
					return "", fmt.Errorf("unknown type %q", name)
				}
				opts.Types = append(opts.Types, typ)
			}
		}
		if s := arg("body-max"); s != "" {
			opts.BodyMax, _ = strconv.Atoi(s)
		}
		err = Replay(&out, data, opts)
		for _, line := range strings.SplitAfter(diag.String(), "\n") {
			if line != "" {
				out.WriteString("diag: " + line)
			}
		}
		return out.String(), err
	case "audit":
		seq, _ := strconv.ParseUint(arg("seq"), 10, 64)
		lives, err := Audit(data, arg("entity"), AuditOptions{Seq: seq, MessageID: arg("message-id"), Retained: retained})
		if err != nil {
			return "", err
		}
		if asJSON {
			return jsonLines(lives)
		}
		err = WriteLives(&out, lives)
		return out.String(), err
	case "state":
		at, err := point("at")
		if err != nil {
			return "", err
		}
		rep, err := State(data, arg("entity"), StateOptions{At: at})
		if err != nil {
			return "", err
		}
		if asJSON {
			return jsonLines(rep)
		}
		err = rep.WriteText(&out)
		return out.String(), err
	case "dump":
		rep, err := Dump(data, DumpOptions{Entity: arg("entity"), Retained: retained})
		if err != nil {
			return "", err
		}
		err = rep.WriteText(&out)
		return out.String(), err
	case "verify":
		findings, err := Verify(data)
		if len(findings) == 0 && err == nil {
			return "clean\n", nil
		}
		return sprintLines(findings), err
	}
	return "", fmt.Errorf("unknown command %q", td.Cmd)
}

func jsonLines(v any) (string, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	return string(b) + "\n", err
}
