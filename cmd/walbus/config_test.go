package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/walbus/walbus/admin/emuconfig"
)

func queue(name, forwardTo, forwardDLQ string) emuconfig.Queue {
	q := emuconfig.Queue{Name: name}
	if forwardTo != "" {
		q.Properties.ForwardTo = &forwardTo
	}
	if forwardDLQ != "" {
		q.Properties.ForwardDeadLetteredMessagesTo = &forwardDLQ
	}
	return q
}

// Queues are created after the queues they forward to, in the file's order
// otherwise; a forwarding cycle cannot be created and is an error.
func TestForwardTargetsFirst(t *testing.T) {
	got, err := forwardTargetsFirst([]emuconfig.Queue{
		queue("a", "b", ""), queue("c", "", ""), queue("b", "", "D"), queue("d", "", ""),
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, q := range got {
		names = append(names, q.Name)
	}
	if fmt.Sprint(names) != "[d b a c]" {
		t.Fatalf("order %v", names)
	}
	_, err = forwardTargetsFirst([]emuconfig.Queue{queue("a", "b", ""), queue("b", "", "a")})
	if err == nil || !strings.Contains(err.Error(), "comes back") {
		t.Fatalf("a cycle: %v", err)
	}
}
