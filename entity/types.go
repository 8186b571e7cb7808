package entity

// Types is a set of task and entity types registered before a Host exists,
// so that a registration error (an invalid or duplicate type name, a nil
// handler, a registration function's own error) is reported when a program
// is configured rather than when its host starts. A runner collects its
// types into one at runner.New and gives them to the Host it creates in
// Run (WithTypes). The zero value is an empty set; it is safe for
// concurrent use.
type Types struct {
	reg    registry
	single singletonTypes
}

// Register adds an entity type, as Host.Register does.
func (t *Types) Register(typ string, f Factory) error { return t.reg.register(typ, f) }

// Define adds an entity type defined by its operations, as Host.Define
// does.
func (t *Types) Define(d *Definition) error { return t.reg.define(d) }

// RegisterFunc adds a task type without per-entity state, as
// Host.RegisterFunc does.
func (t *Types) RegisterFunc(typ string, fn HandlerFunc) error { return t.reg.registerFunc(typ, fn) }

// Singletons lists the registered singleton types, sorted.
func (t *Types) Singletons() []string { return t.single.names() }

// Names lists the registered types, sorted.
func (t *Types) Names() []string { return t.reg.names() }

// Collect runs register, a function written against a Host (as
// runner.WithTypes takes), and adds what it registers to t. register is
// given a host that only records types: it may call Register, RegisterFunc
// and Types (which lists the types t held before plus those registered so
// far), and nothing else, since that host runs nothing. A type already in t
// is refused as on a Host; what register added before it failed stays in
// t.
func (t *Types) Collect(register func(*Host) error) error {
	if register == nil {
		return nil
	}
	return register(&Host{reg: &t.reg, single: &t.single})
}

// registry returns a registry of its own holding t's types (empty for nil
// t): a host registers further types on it without changing t.
func (t *Types) registry() *registry {
	if t == nil {
		return (*registry)(nil).clone()
	}
	return t.reg.clone()
}

// singletons returns a copy of t's singleton types (empty for nil t).
func (t *Types) singletons() *singletonTypes {
	if t == nil {
		return (*singletonTypes)(nil).clone()
	}
	return t.single.clone()
}

// WithTypes starts the host with the types of t (more may be registered on
// the host afterwards; they do not change t).
func WithTypes(t *Types) Option { return func(o *hostOptions) { o.types = t } }
