package wfp

import (
	"errors"
	"fmt"
	"time"
)

// Engine is a filtering engine: Windows' Base Filtering Engine (NewEngine, Windows only) or
// wfptest.Engine.
type Engine interface {
	// Open opens a session. A dynamic session's objects are deleted when it is closed or
	// when the process that opened it ends, however it ends (Windows does it, not us).
	Open(opts SessionOptions) (Session, error)
	// AppID returns the app ID a FieldApp condition on path compiles to (Windows:
	// FwpmGetAppIdFromFileName0, the executable's NT device path). It fails when Windows
	// cannot resolve path (no such volume or file): a filter naming it would fail too.
	AppID(path string) (string, error)
}

// SessionOptions configure a session.
type SessionOptions struct {
	// Name is shown in Windows' tools (netsh wfp show state).
	Name string
	// Dynamic: the session's objects go when the session or its process ends.
	Dynamic bool
	// TxnTimeout is how long Begin waits for the engine's transaction lock (one transaction
	// at a time, machine-wide); zero means Windows' default of 15 s.
	TxnTimeout time.Duration
}

// Session is an open session to an engine. Changes outside a transaction take effect one
// by one; between Begin and Commit they take effect together at Commit, or not at all
// after Abort or a failed Commit. Objects another session added are visible and may be
// deleted by key.
//
// A Session is used by one goroutine at a time. After Close every method returns an error
// wrapping ErrClosed; Close again returns nil. Closing a session with a transaction open
// aborts the transaction.
type Session interface {
	Begin() error
	Commit() error
	Abort() error

	AddProvider(p Provider) error
	DeleteProvider(k Key) error
	// Provider returns the provider with key k, or an error wrapping ErrNotFound.
	Provider(k Key) (Provider, error)

	AddSublayer(s Sublayer) error
	DeleteSublayer(k Key) error
	// Sublayer returns the sublayer with key k, or an error wrapping ErrNotFound.
	Sublayer(k Key) (Sublayer, error)

	AddFilter(f Filter) error
	DeleteFilter(k Key) error
	// Filters lists the filters owned by provider, boot-time ones included. Conditions
	// may be left nil: the Windows engine does not read them back (everything else is
	// filled, Digest included).
	Filters(provider Key) ([]Filter, error)
	// AllSublayers lists every sublayer of the engine, whoever added it (another VPN's, an
	// EDR's, Windows Firewall's).
	AllSublayers() ([]Sublayer, error)
	// LayerFilters lists every filter at layer l, whoever added it, boot-time ones
	// included; as with Filters, Conditions may be nil.
	LayerFilters(l Layer) ([]Filter, error)

	Close() error
}

// Code is a Windows error number from the filtering engine (FWP_E_*, RPC or Win32). The
// Windows engine returns its errors as Codes and wfptest returns the same Codes for the
// same faults, so errors.Is against the Err values below works with both.
type Code uint32

// The codes the guard tells apart (winerror.h).
const (
	CodeFilterNotFound     Code = 0x80320003 // FWP_E_FILTER_NOT_FOUND
	CodeProviderNotFound   Code = 0x80320005 // FWP_E_PROVIDER_NOT_FOUND
	CodeSublayerNotFound   Code = 0x80320007 // FWP_E_SUBLAYER_NOT_FOUND
	CodeNotFound           Code = 0x80320008 // FWP_E_NOT_FOUND
	CodeAlreadyExists      Code = 0x80320009 // FWP_E_ALREADY_EXISTS
	CodeInUse              Code = 0x8032000A // FWP_E_IN_USE
	CodeDynamicSession     Code = 0x8032000B // FWP_E_DYNAMIC_SESSION_IN_PROGRESS
	CodeNoTxn              Code = 0x8032000D // FWP_E_NO_TXN_IN_PROGRESS
	CodeTxnInProgress      Code = 0x8032000E // FWP_E_TXN_IN_PROGRESS
	CodeTxnAborted         Code = 0x8032000F // FWP_E_TXN_ABORTED
	CodeSessionAborted     Code = 0x80320010 // FWP_E_SESSION_ABORTED
	CodeTimeout            Code = 0x80320012 // FWP_E_TIMEOUT (the transaction lock)
	CodeLifetimeMismatch   Code = 0x80320016 // FWP_E_LIFETIME_MISMATCH
	CodeInvalidHandle      Code = 6          // ERROR_INVALID_HANDLE
	CodeAccessDenied       Code = 5          // ERROR_ACCESS_DENIED
	CodeNotSupported       Code = 50         // ERROR_NOT_SUPPORTED
	CodeCallNotImplemented Code = 120        // ERROR_CALL_NOT_IMPLEMENTED
	CodeEngineNotRunning   Code = 0x6D9      // EPT_S_NOT_REGISTERED: BFE is not running
	CodeCannotSupport      Code = 0x6E4      // RPC_S_CANNOT_SUPPORT: what Wine's FwpmEngineOpen0 returns
)

var codeText = map[Code]string{
	CodeFilterNotFound:     "filter not found",
	CodeProviderNotFound:   "provider not found",
	CodeSublayerNotFound:   "sublayer not found",
	CodeNotFound:           "object not found",
	CodeAlreadyExists:      "object already exists",
	CodeInUse:              "object in use (other objects refer to it)",
	CodeDynamicSession:     "not allowed in a dynamic session",
	CodeNoTxn:              "no transaction in progress",
	CodeTxnInProgress:      "a transaction is already in progress",
	CodeTxnAborted:         "transaction aborted",
	CodeSessionAborted:     "session aborted",
	CodeTimeout:            "timed out waiting for the transaction lock",
	CodeLifetimeMismatch:   "object lifetimes do not match (a persistent object names a non-persistent one)",
	CodeInvalidHandle:      "invalid session handle",
	CodeAccessDenied:       "access denied (run as Administrator)",
	CodeNotSupported:       "not supported",
	CodeCallNotImplemented: "not implemented",
	CodeEngineNotRunning:   "the Base Filtering Engine (BFE) is not running",
	CodeCannotSupport:      "the filtering engine does not support the operation",
}

func (c Code) Error() string {
	if t, ok := codeText[c]; ok {
		return fmt.Sprintf("wfp: %s (%#x)", t, uint32(c))
	}
	return fmt.Sprintf("wfp: error %#x", uint32(c))
}

// Is makes errors.Is(c, ErrNotFound) and the like work.
func (c Code) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return c == CodeFilterNotFound || c == CodeProviderNotFound || c == CodeSublayerNotFound || c == CodeNotFound
	case ErrAlreadyExists:
		return c == CodeAlreadyExists
	case ErrInUse:
		return c == CodeInUse
	case ErrClosed:
		return c == CodeInvalidHandle
	case ErrUnavailable:
		return c == CodeEngineNotRunning || c == CodeCannotSupport || c == CodeNotSupported || c == CodeCallNotImplemented
	}
	return false
}

// Sentinel errors, matched with errors.Is.
var (
	ErrNotFound      = errors.New("wfp: not found")
	ErrAlreadyExists = errors.New("wfp: already exists")
	ErrInUse         = errors.New("wfp: in use")
	ErrClosed        = errors.New("wfp: session closed")
	// ErrUnavailable: there is no working filtering engine (BFE stopped, or an emulation
	// such as Wine that does not implement it).
	ErrUnavailable = errors.New("wfp: filtering engine unavailable")
)
