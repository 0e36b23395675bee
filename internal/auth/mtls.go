package auth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
)

// ReservedPrefix starts the metadata keys that belong to the gateway. A
// call from outside that carries one is refused, and HeaderMatcher never
// forwards an HTTP header into one.
const ReservedPrefix = "x-toolgate-"

// certIdentity names the user of a verified client certificate: the
// subject's CommonName, or else the first URI SAN (a SPIFFE ID, say), or
// else the first DNS SAN. The subject's OrganizationalUnits are the roles.
func certIdentity(c *x509.Certificate) (Identity, error) {
	user := c.Subject.CommonName
	switch {
	case user != "":
	case len(c.URIs) > 0:
		user = c.URIs[0].String()
	case len(c.DNSNames) > 0:
		user = c.DNSNames[0]
	default:
		return Identity{}, errors.New("the client certificate has no CommonName, URI or DNS name")
	}
	return Identity{User: user, Roles: append([]string(nil), c.Subject.OrganizationalUnit...), Method: MethodMTLS}, nil
}

// verifiedLeaf returns the leaf of the first verified chain, or nil when
// the connection carries no certificate the TLS stack verified.
func verifiedLeaf(cs *tls.ConnectionState) *x509.Certificate {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return nil
	}
	return cs.VerifiedChains[0][0]
}
