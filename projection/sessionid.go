package projection

import (
	"strings"
	"unicode/utf8"
)

// EmptySessionID stands for the session id "". Service Bus takes a message
// whose group-id is present and empty as one of session "", distinct from
// a message without a session, while walbus uses "" for none throughout
// (Message, events, AcceptSession's next available session). It is not
// valid UTF-8, so no client text maps to it but "": clients' session ids
// come in through SessionIDOf and go back out through ClientSessionID.
const EmptySessionID = "\xff"

// SessionIDOf is the session id a client's text names: EmptySessionID for
// "", and the text otherwise, with any bytes that are not UTF-8 replaced
// by U+FFFD (as .NET decodes them), so that nothing else becomes
// EmptySessionID.
func SessionIDOf(text string) string {
	switch {
	case text == "":
		return EmptySessionID
	case !utf8.ValidString(text):
		return strings.ToValidUTF8(text, "\uFFFD")
	}
	return text
}

// ClientSessionID is the text a client sees for session id: "" for
// EmptySessionID.
func ClientSessionID(id string) string {
	if id == EmptySessionID {
		return ""
	}
	return id
}
