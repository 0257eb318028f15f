package sas

import (
	"strings"
	"testing"
)

func TestRightsHas(t *testing.T) {
	for _, tc := range []struct {
		have, want Rights
		ok         bool
	}{
		{Send, Send, true},
		{Send, Listen, false},
		{Listen, Send, false},
		{Send | Listen, Send | Listen, true},
		{Send | Listen, Manage, false},
		{Manage, Send, true},
		{Manage, Listen, true},
		{Manage, Send | Listen | Manage, true},
		{Send, Send | Listen, false},
		{0, Send, false},
		{Listen, 0, true},
	} {
		if got := tc.have.Has(tc.want); got != tc.ok {
			t.Errorf("%v.Has(%v) = %v", tc.have, tc.want, got)
		}
	}
}

func TestParseRights(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Rights
		str  string
	}{
		{"Send", Send, "Send"},
		{"Listen", Listen, "Listen"},
		{"Manage", Manage, "Manage"},
		{"Send,Listen", Send | Listen, "Send,Listen"},
		{" listen , SEND ", Send | Listen, "Send,Listen"},
		{"Manage,Send,Listen", Send | Listen | Manage, "Send,Listen,Manage"},
		{"Send,Send", Send, "Send"},
	} {
		got, err := ParseRights(tc.in)
		if err != nil || got != tc.want || got.String() != tc.str {
			t.Errorf("ParseRights(%q) = %v (%q), %v", tc.in, got, got.String(), err)
		}
		if back, err := ParseRights(got.String()); err != nil || back != got {
			t.Errorf("round trip of %q: %v, %v", got.String(), back, err)
		}
	}
	for _, bad := range []string{"", " ", "Send,", ",Listen", "Send;Listen", "Read", "Send Listen"} {
		if _, err := ParseRights(bad); err == nil {
			t.Errorf("ParseRights(%q) accepted", bad)
		}
	}
	if s := (Send | 0x40).String(); s != "Send,0x40" {
		t.Errorf("unknown bits: %q", s)
	}
}

func TestNewKeys(t *testing.T) {
	keys, err := NewKeys(Key{Name: "a", Value: "1", Rights: Send}, Key{Name: "A", Value: "2", Rights: Listen})
	if err != nil {
		t.Fatal(err)
	}
	if k, ok := keys.Lookup("A"); !ok || k.Value != "2" || keys.Len() != 2 {
		t.Errorf("Lookup(A) = %+v, %v", k, ok)
	}
	if _, ok := keys.Lookup("b"); ok {
		t.Error("Lookup(b) found a key")
	}
	if _, ok := (Keys{}).Lookup("a"); ok {
		t.Error("zero Keys found a key")
	}
	for _, tc := range []struct {
		keys []Key
		want string
	}{
		{[]Key{{Name: "", Value: "v"}}, "no name"},
		{[]Key{{Name: "a", Value: ""}}, "empty value"},
		{[]Key{{Name: "a", Value: "v"}, {Name: "a", Value: "w"}}, "duplicate"},
		{[]Key{{Name: "a", Value: "v", Rights: 0x80}}, "unknown rights"},
	} {
		if _, err := NewKeys(tc.keys...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewKeys(%+v) = %v, want %q", tc.keys, err, tc.want)
		}
	}
}
