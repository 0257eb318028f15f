// Command walbus is the walbus broker and its tools.
package main

import (
	"fmt"
	"os"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 {
		usage()
		return 2
	}
	switch args[0] {
	case "version":
		fmt.Println("walbus", version)
		return 0
	case "serve":
		return serve(args[1:])
	case "cert":
		return certCmd(args[1:])
	case "bench":
		return benchCmd(args[1:])
	case "compact":
		return compactCmd(args[1:])
	case "queue", "topic", "subscription", "rule":
		return entityCmd(args[0], args[1:])
	case "dlq":
		return dlqCmd(args[1:])
	case "cluster":
		return clusterCmd(args[1:])
	case "replay", "audit", "state", "verify", "dump":
		return toolsCmd(args[0], args[1:])
	case "help", "-h", "--help":
		usage()
		return 0
	}
	fmt.Fprintf(os.Stderr, "walbus: unknown command %q\n", args[0])
	usage()
	return 2
}

func usage() {
	fmt.Fprint(os.Stderr, `walbus: a durable Azure Service Bus compatible broker

Usage:
  walbus serve [flags]    run the broker (walbus serve --help for its flags)
  walbus cert [flags]     write a local CA and server certificate for TLS
  walbus bench [flags]    load a broker with real clients and report throughput and latency
  walbus cluster status --http HOST:PORT,...   a cluster's members, leaders and lag
  walbus cluster add|remove --node-id N ...    change a cluster's membership

Entities of a running walbus (through its administration API):
  walbus queue create|get|list|update|delete NAME [flags]
  walbus topic create|get|list|update|delete NAME [flags]
  walbus subscription create|get|list|update|delete TOPIC NAME [flags]
  walbus rule create|get|list|update|delete TOPIC SUBSCRIPTION NAME [flags]
  walbus dlq redrive|purge ENTITY [flags]   re-drive or purge dead-lettered messages

Offline tools (on a data directory; the server stopped):
  walbus replay [flags]   every event in log order, as a table or JSON lines
  walbus audit [flags]    the whole life of one message
  walbus state [flags]    an entity's state, now or at a point in the past
  walbus verify [flags]   check every log, archive and snapshot
  walbus dump [flags]     segments and snapshots: sizes, ranges, record counts
  walbus compact [flags]  reclaim the disk held by settled messages
  walbus version          print the version
`)
}
