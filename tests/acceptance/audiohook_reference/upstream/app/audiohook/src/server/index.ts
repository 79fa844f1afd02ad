export * from './mediadata';
export * from './serversession';
export * from './serversessionimpl';