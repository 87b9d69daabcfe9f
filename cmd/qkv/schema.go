package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/config"
)

// schemaField is one field of a run's configuration that a flag sets, as
// its struct tags declare it (config.Config's and the model's): the tags
// are the one table from which the flags of train, bench and gradcheck are
// registered and config.json's keys are mapped back to flags, so that a
// new option declared in layers or config reaches the command line with no
// line here.
type schemaField struct {
	// path is the field's JSON path in config.json ("model.kv_heads").
	path string
	// flag, help and zero are its tags: the flag's name, its usage, and
	// what a zero value stands for ("" when it stands for nothing).
	flag, help, zero string
	// group is its group tag: the heading --help lists the flag under
	// ("model", "attention", ...; see flagGroups).
	group string
	// value is the field, addressable, when the walk was over a value.
	value reflect.Value
}

// schemaOf returns the flagged fields of the struct v points to (or of a
// zero one for a nil pointer of its type), in declaration order, walking
// into nested structs as encoding/json does: an untagged embedded struct
// adds its fields at the same path, a tagged one at path "key.".
func schemaOf(v any) []schemaField {
	rv := reflect.ValueOf(v)
	if rv.IsNil() {
		rv = reflect.New(rv.Type().Elem())
	}
	var fields []schemaField
	walkSchema(rv.Elem(), "", &fields)
	return fields
}

func walkSchema(v reflect.Value, prefix string, fields *[]schemaField) {
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		key, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if key == "-" || !sf.IsExported() {
			continue
		}
		if name := sf.Tag.Get("flag"); name != "" {
			*fields = append(*fields, schemaField{path: prefix + key, flag: name, help: sf.Tag.Get("help"), zero: sf.Tag.Get("zero"), group: sf.Tag.Get("group"), value: v.Field(i)})
			continue
		}
		if sf.Type.Kind() != reflect.Struct {
			continue
		}
		switch {
		case sf.Anonymous && key == "":
			walkSchema(v.Field(i), prefix, fields)
		case key != "":
			walkSchema(v.Field(i), prefix+key+".", fields)
		}
	}
}

// registerSchema registers on fs a flag for every flagged field of the
// configuration cfg points to, each writing its field, but for the flags
// skip names.
func registerSchema(fs *flag.FlagSet, cfg any, skip ...string) {
	for _, f := range schemaOf(cfg) {
		if !slices.Contains(skip, f.flag) {
			fs.Var(fieldFlag{f.value, f.zero}, f.flag, f.help)
		}
	}
}

// schemaUsageError is a usage error for err, the refusal of the
// configuration cfg points to: when a layers.FieldError names the key at
// fault, it reads "--flag (with --other): problem" by the schema's flags.
func schemaUsageError(err error, cfg any) error {
	var fe *layers.FieldError
	if !errors.As(err, &fe) || fe.Field == "" {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	flags := map[string]string{}
	for _, f := range schemaOf(cfg) {
		flags[f.path] = "--" + f.flag
	}
	name := func(key string) string { return cmp.Or(flags[key], key) }
	at := name(fe.Field)
	if len(fe.With) > 0 {
		with := make([]string, len(fe.With))
		for i, w := range fe.With {
			with[i] = name(w)
		}
		at += " (with " + strings.Join(with, ", ") + ")"
	}
	return fmt.Errorf("%w: %s: %v", errUsage, at, fe)
}

// fieldFlags maps the JSON path of a config.Config field (as a
// config.Error names it) to the flag of train and bench that sets it: the
// schema's flags, the task's, and the fields that come from the task or
// name the whole model.
var fieldFlags = func() map[string]string {
	m := map[string]string{
		"task.name":     "task",
		"task.params":   "task",
		"model.vocab":   "task",
		"model.max_len": "task",
		"model":         "",
	}
	for _, f := range taskFlagNames {
		m["task.params."+strings.ReplaceAll(f, "-", "_")] = f
	}
	for _, f := range schemaOf((*config.Config)(nil)) {
		m[f.path] = f.flag
	}
	return m
}()

// taskFlagNames are the flags of the task's parameters, as taskFlags
// registers them (--task aside).
var taskFlagNames = func() []string {
	fs := flag.NewFlagSet("task", flag.ContinueOnError)
	var tf taskFlags
	tf.register(fs, "")
	var names []string
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name != "task" {
			names = append(names, f.Name)
		}
	})
	return names
}()

// fieldFlag is the flag.Value of one configuration field, whatever its
// kind: the named string kinds (activation, positions, ...), which the
// configuration's validation judges, and ints, floats and bools. A field
// whose zero value stands for a default (zero) shows that default, and
// stores it given explicitly as the zero value, so that config.json stays
// without the field as before the flag existed and --resume sees no
// change; a configuration that already spells the default out keeps it.
type fieldFlag struct {
	v    reflect.Value
	zero string
}

// String returns the field's value, its default for a zero value with one
// ("" for the zero fieldFlag the flag package makes to find defaults).
func (f fieldFlag) String() string {
	if !f.v.IsValid() {
		return ""
	}
	if f.zero != "" && f.v.IsZero() {
		return f.zero
	}
	switch f.v.Kind() {
	case reflect.String:
		return f.v.String()
	case reflect.Bool:
		return strconv.FormatBool(f.v.Bool())
	case reflect.Int:
		return strconv.FormatInt(f.v.Int(), 10)
	case reflect.Uint64:
		return strconv.FormatUint(f.v.Uint(), 10)
	case reflect.Float64:
		return strconv.FormatFloat(f.v.Float(), 'g', -1, 64)
	}
	return fmt.Sprint(f.v.Interface())
}

// Set parses s into the field.
func (f fieldFlag) Set(s string) error {
	parsed := reflect.New(f.v.Type()).Elem()
	if err := parseInto(parsed, s); err != nil {
		return err
	}
	if f.zero != "" {
		def := reflect.New(f.v.Type()).Elem()
		if err := parseInto(def, f.zero); err != nil {
			return fmt.Errorf("the default %q of the field: %w", f.zero, err)
		}
		if parsed.Equal(def) {
			if !f.v.Equal(def) {
				f.v.SetZero()
			}
			return nil
		}
	}
	f.v.Set(parsed)
	return nil
}

// IsBoolFlag lets a bool field's flag be given without a value.
func (f fieldFlag) IsBoolFlag() bool { return f.v.IsValid() && f.v.Kind() == reflect.Bool }

// parseInto parses s into v by v's kind.
func parseInto(v reflect.Value, s string) error {
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return err
		}
		v.SetBool(b)
	case reflect.Int:
		n, err := strconv.ParseInt(s, 0, strconv.IntSize)
		if err != nil {
			return numError(err)
		}
		v.SetInt(n)
	case reflect.Uint64:
		n, err := strconv.ParseUint(s, 0, 64)
		if err != nil {
			return numError(err)
		}
		v.SetUint(n)
	case reflect.Float64:
		x, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return numError(err)
		}
		v.SetFloat(x)
	default:
		return fmt.Errorf("a field of kind %v has no flag", v.Kind())
	}
	return nil
}

// numError is strconv's error in the flag package's words.
func numError(err error) error {
	if ne, ok := err.(*strconv.NumError); ok {
		switch ne.Err {
		case strconv.ErrSyntax:
			return fmt.Errorf("parse error")
		case strconv.ErrRange:
			return fmt.Errorf("value out of range")
		}
	}
	return err
}
