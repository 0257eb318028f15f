package frames

// Numeric descriptors, (domain 0 << 32) | id, of the composite types this
// package knows (AMQP 1.0 §2.7, §2.8.14, §3.4, §3.5, §4.5, §5.3.3).
const (
	CodeOpen        uint64 = 0x10
	CodeBegin       uint64 = 0x11
	CodeAttach      uint64 = 0x12
	CodeFlow        uint64 = 0x13
	CodeTransfer    uint64 = 0x14
	CodeDisposition uint64 = 0x15
	CodeDetach      uint64 = 0x16
	CodeEnd         uint64 = 0x17
	CodeClose       uint64 = 0x18

	CodeError uint64 = 0x1d

	CodeReceived uint64 = 0x23
	CodeAccepted uint64 = 0x24
	CodeRejected uint64 = 0x25
	CodeReleased uint64 = 0x26
	CodeModified uint64 = 0x27
	CodeSource   uint64 = 0x28
	CodeTarget   uint64 = 0x29

	CodeCoordinator        uint64 = 0x30
	CodeDeclare            uint64 = 0x31
	CodeDischarge          uint64 = 0x32
	CodeDeclared           uint64 = 0x33
	CodeTransactionalState uint64 = 0x34

	CodeSASLMechanisms uint64 = 0x40
	CodeSASLInit       uint64 = 0x41
	CodeSASLChallenge  uint64 = 0x42
	CodeSASLResponse   uint64 = 0x43
	CodeSASLOutcome    uint64 = 0x44
)

// symbolicNames maps each numeric descriptor to the symbolic form a peer
// may send instead (AMQP 1.0 §1.5: decoders should accept both).
var symbolicNames = map[uint64]string{
	CodeOpen:               "amqp:open:list",
	CodeBegin:              "amqp:begin:list",
	CodeAttach:             "amqp:attach:list",
	CodeFlow:               "amqp:flow:list",
	CodeTransfer:           "amqp:transfer:list",
	CodeDisposition:        "amqp:disposition:list",
	CodeDetach:             "amqp:detach:list",
	CodeEnd:                "amqp:end:list",
	CodeClose:              "amqp:close:list",
	CodeError:              "amqp:error:list",
	CodeReceived:           "amqp:received:list",
	CodeAccepted:           "amqp:accepted:list",
	CodeRejected:           "amqp:rejected:list",
	CodeReleased:           "amqp:released:list",
	CodeModified:           "amqp:modified:list",
	CodeSource:             "amqp:source:list",
	CodeTarget:             "amqp:target:list",
	CodeCoordinator:        "amqp:coordinator:list",
	CodeDeclare:            "amqp:declare:list",
	CodeDischarge:          "amqp:discharge:list",
	CodeDeclared:           "amqp:declared:list",
	CodeTransactionalState: "amqp:transactional-state:list",
	CodeSASLMechanisms:     "amqp:sasl-mechanisms:list",
	CodeSASLInit:           "amqp:sasl-init:list",
	CodeSASLChallenge:      "amqp:sasl-challenge:list",
	CodeSASLResponse:       "amqp:sasl-response:list",
	CodeSASLOutcome:        "amqp:sasl-outcome:list",
}

// codeForName resolves a symbolic descriptor. The loop over a small map
// keeps the lookup free of allocations (no string conversion escapes).
func codeForName(name []byte) (uint64, bool) {
	for code, n := range symbolicNames {
		if n == string(name) {
			return code, true
		}
	}
	return 0, false
}

// nameOf gives a readable name for error messages.
func nameOf(code uint64) string {
	if n, ok := symbolicNames[code]; ok {
		return n
	}
	return "unknown composite"
}
