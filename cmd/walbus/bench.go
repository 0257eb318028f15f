package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/walbus/walbus/bench"
)

// benchCmd runs walbus bench; Ctrl-C ends the run early and still reports.
func benchCmd(args []string) int {
	cfg, err := bench.ParseArgs(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	tuneGC()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := bench.Run(ctx, cfg, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "walbus bench:", err)
		return 1
	}
	if cfg.JSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(res)
	} else {
		err = res.WriteText(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "walbus bench:", err)
		return 1
	}
	if problem := res.Problem(); problem != "" {
		fmt.Fprintln(os.Stderr, "walbus bench: failed:", problem)
		return 1
	}
	return 0
}
