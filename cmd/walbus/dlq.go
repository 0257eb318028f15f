package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/walbus/walbus/amqpserver/sas"
)

// The dead-letter commands: walbus dlq redrive|purge ENTITY, through a
// running walbus's HTTP API (/$walbus/redrive and /$walbus/purge, which
// the console uses too).

// seqList is a repeatable --seq flag.
type seqList []uint64

func (s *seqList) String() string { return fmt.Sprint([]uint64(*s)) }

func (s *seqList) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(part), 10, 64)
		if err != nil || n == 0 {
			return fmt.Errorf("a SequenceNumber is a positive integer, not %q", part)
		}
		*s = append(*s, n)
	}
	return nil
}

func dlqUsage(w io.Writer) {
	fmt.Fprint(w, `Usage:
  walbus dlq redrive ENTITY (--seq N [--seq N...] | --all) [flags]
      move dead-lettered messages back to their queue or subscription, without
      their dead-letter reason, with a delivery count of zero
  walbus dlq purge ENTITY [flags]
      delete every dead-lettered message (locked ones stay)

ENTITY is a queue or TOPIC/Subscriptions/SUBSCRIPTION.

Flags:
`)
}

// dlqCmd runs `walbus dlq VERB ...`.
func dlqCmd(args []string) int {
	if len(args) == 0 || (args[0] != "redrive" && args[0] != "purge") {
		dlqUsage(os.Stderr)
		return 2
	}
	verb := args[0]
	fs := flag.NewFlagSet("walbus dlq "+verb, flag.ContinueOnError)
	fs.Usage = func() { dlqUsage(fs.Output()); fs.PrintDefaults() }
	server := fs.String("server", "http://127.0.0.1:5300", "the walbus to manage: its --http address (https:// when it has a certificate)")
	keyName := fs.String("key-name", defaultKeyName, "SAS key name (with Manage rights)")
	key := fs.String("key", defaultKey, "SAS key")
	var seqs seqList
	all := false
	if verb == "redrive" {
		fs.Var(&seqs, "seq", "a SequenceNumber to re-drive (repeatable, or comma-separated)")
		fs.BoolVar(&all, "all", false, "re-drive every dead-lettered message")
	}
	names, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return 2
	}
	if len(names) != 1 {
		fmt.Fprintln(os.Stderr, "walbus dlq: name one queue or TOPIC/Subscriptions/SUBSCRIPTION")
		return 2
	}
	if verb == "redrive" && (len(seqs) == 0) == !all {
		fmt.Fprintln(os.Stderr, "walbus dlq redrive: give --seq or --all (one of them)")
		return 2
	}
	path, body := "/$walbus/redrive/"+names[0], []byte(nil)
	if verb == "redrive" && !all {
		body, _ = json.Marshal(map[string][]uint64{"sequenceNumbers": seqs})
	}
	if verb == "purge" {
		path = "/$walbus/purge/" + names[0] + "/$DeadLetterQueue"
	}
	out, err := postManage(*server, path, *keyName, *key, body)
	if err != nil {
		fmt.Fprintln(os.Stderr, "walbus dlq "+verb+":", err)
		return 1
	}
	for k, n := range out {
		fmt.Printf("%s: %d %s\n", names[0], n, k)
	}
	return 0
}

// postManage posts body to path on server with a Manage key's token and
// returns the JSON counts it answers.
func postManage(server, path, keyName, key string, body []byte) (map[string]int, error) {
	u, err := url.Parse(server)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("--server %q: want http://HOST:PORT or https://HOST:PORT", server)
	}
	target := strings.TrimRight(server, "/") + path
	req, err := http.NewRequest(http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	token := sas.Sign("sb://"+u.Host+"/", sas.Key{Name: keyName, Value: key}, time.Now().Add(time.Hour), sas.JSStyle)
	req.Header.Set("Authorization", token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		if json.Unmarshal(raw, &e) == nil && e.Error != "" {
			return nil, fmt.Errorf("%s: %s", resp.Status, e.Error)
		}
		return nil, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(raw)))
	}
	var out map[string]int
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("answer %q: %v", raw, err)
	}
	return out, nil
}
