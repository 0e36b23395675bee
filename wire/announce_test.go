package wire

import "testing"

func TestAnnounceKey(t *testing.T) {
	if got := AnnounceKey("echo", "ab12"); got != "echo@ab12" {
		t.Fatalf("AnnounceKey = %q", got)
	}
	if got := AnnounceKey("echo", ""); got != "echo" {
		t.Fatalf("AnnounceKey without instance = %q", got)
	}
	for _, c := range []struct {
		key, instance string
		withdrawal    bool
		id, inst      string
		ok            bool
	}{
		{"echo@ab12", "ab12", false, "echo", "ab12", true},
		{"echo", "", false, "echo", "", true},
		{"a@b@c", "c", false, "a@b", "c", true},
		{"echo@ab12", "zz", false, "", "", false},       // the key names another instance
		{"@ab12", "ab12", false, "", "", false},         // no service id
		{"echo@ab12", "", false, "echo@ab12", "", true}, // an announcement as a whole, under that id
		{"echo@ab12", "", true, "echo", "ab12", true},   // a bare tombstone of an instance's key
		{"echo@", "", true, "echo@", "", true},          // no instance after the @
		{"", "", false, "", "", false},
	} {
		id, inst, ok := SplitAnnounceKey(c.key, c.instance, c.withdrawal)
		if ok != c.ok || (ok && (id != c.id || inst != c.inst)) {
			t.Errorf("SplitAnnounceKey(%q, %q, %v) = %q, %q, %v; want %q, %q, %v", c.key, c.instance, c.withdrawal, id, inst, ok, c.id, c.inst, c.ok)
		}
	}
}

// What a key splits into puts the key back together.
func FuzzSplitAnnounceKey(f *testing.F) {
	f.Add("echo@ab12", "ab12", false)
	f.Add("echo@ab12", "", true)
	f.Add("a@b@c", "", true)
	f.Fuzz(func(t *testing.T, key, instance string, withdrawal bool) {
		id, inst, ok := SplitAnnounceKey(key, instance, withdrawal)
		if !ok {
			return
		}
		if id == "" || AnnounceKey(id, inst) != key {
			t.Fatalf("SplitAnnounceKey(%q, %q, %v) = %q, %q: does not make the key again", key, instance, withdrawal, id, inst)
		}
		if instance != "" && inst != instance {
			t.Fatalf("instance %q, split %q", instance, inst)
		}
	})
}
