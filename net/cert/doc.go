// Package cert makes the credentials of a chorus cluster: a private
// certificate authority (ECDSA P-256, self-signed) and node certificates
// it signs, usable as both TLS server and client certificates (mutual
// TLS 1.3 between the controller, node agents and workers). `chorus cert`
// is its command line.
//
// Every node certificate carries the DNS name ServerName: peers check
// that the certificate chains to the cluster CA and names ServerName, not
// that it names the peer's address, because addresses inside clusters
// (pods, namespaces, Slurm allocations) are not known when the
// certificates are made. Membership of the cluster is what the CA
// signature proves.
package cert
