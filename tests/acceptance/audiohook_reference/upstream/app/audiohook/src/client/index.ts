export * from './clientsession';
export * from './clientsessionimpl';
export * from './mediasource';
