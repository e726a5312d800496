"""The broker's security: TLS listeners and client-certificate principals (`tls`), SASL authentication
(`sasl`), and the security properties they read (`config`). The connection layer (network.py) only calls
the hooks these provide: a listener's SSL context and a connection's authenticator."""
