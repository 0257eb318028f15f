package event

// Queue numbers inside an entity log. Every queue of messages (a queue
// entity's own; later each subscription of a topic) owns a group of
// QueueGroup consecutive numbers, starting at a multiple of QueueGroup:
//
//	group*3 + 0   its messages
//	group*3 + 1   its dead-letter subqueue ("<path>/$DeadLetterQueue")
//	group*3 + 2   its transfer dead-letter subqueue ("<path>/$Transfer/$DeadLetterQueue")
//
// A queue entity is group 0. The kind of a queue is its number modulo
// QueueGroup and its subqueues are found from any member of the group, so
// adding groups for subscriptions changes neither. The numbers are stored
// in every record: never renumber. (Logs written before the transfer
// dead-letter subqueue existed use 0 and 1 only, which mean the same.)
const (
	MainQueue               uint32 = 0
	DeadLetterQueue         uint32 = 1
	TransferDeadLetterQueue uint32 = 2

	QueueGroup = 3

	// TransferQueue is, in a queue entity (which has no subscriptions to
	// number), where messages sent through the queue for another entity
	// wait until they reach it (send-via; the Transfer event). It is the
	// first number of group 1; the other two are not used, as what the
	// transfer queue cannot deliver goes to group 0's transfer dead-letter
	// queue, "<queue>/$Transfer/$DeadLetterQueue". No client addresses it.
	TransferQueue uint32 = 3
)

// QueueKind is what a queue number holds within its group.
type QueueKind uint8

const (
	KindMessages QueueKind = iota
	KindDeadLetter
	KindTransferDeadLetter
)

// KindOf is the kind of queue no.
func KindOf(no uint32) QueueKind { return QueueKind(no % QueueGroup) }

// SubqueueOf is the queue of the given kind in no's group.
func SubqueueOf(no uint32, kind QueueKind) uint32 { return no - no%QueueGroup + uint32(kind) }

// GroupOf is the queues of no's group, in number order: the queue and its
// subqueues.
func GroupOf(no uint32) [QueueGroup]uint32 {
	first := no - no%QueueGroup
	return [QueueGroup]uint32{first, first + 1, first + 2}
}
