export * from './audio';
export * from './client';
export * as httpsignature from './httpsignature';
export * from './protocol';
export * from './server';
export * from './utils';
